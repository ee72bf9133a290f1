//! A TCP proxy in front of a real S3-compatible server that can be taken
//! down: a test double for a store outage (the store behind it is real).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Connections the proxy carries at once; more are refused.
const PROXY_CONNECTIONS_MAX: usize = 64;

/// A TCP proxy to `target` that can be taken down: then every connection
/// it carries is cut and new ones are closed at once, as a store that
/// stopped answers. A test double for an outage; the store behind it is
/// the real server.
pub struct Proxy {
    port: u16,
    down: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    pub fn start(target: u16) -> Proxy {
        let port = test_support::free_port_pair();
        let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
        let down = Arc::new(AtomicBool::new(false));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (d, o) = (down.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if d.load(Ordering::SeqCst) || o.lock().unwrap().len() >= PROXY_CONNECTIONS_MAX {
                    drop(client);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                {
                    let mut open = o.lock().unwrap();
                    open.retain(|s| s.peer_addr().is_ok());
                    open.push(client.try_clone().unwrap());
                    open.push(server.try_clone().unwrap());
                }
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
        Proxy { port, down, open }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn take_down(&self) {
        self.down.store(true, Ordering::SeqCst);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    pub fn bring_up(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

/// Copy `from` to `to` on a thread until either side closes.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 64 << 10];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
}

impl Proxy {
    /// `env` (an S3 server's) with its endpoint replaced by this proxy's.
    pub fn env(&self, env: &[(&'static str, String)]) -> Vec<(&'static str, String)> {
        env.iter()
            .map(|(k, v)| match *k {
                "AWS_ENDPOINT_URL" => (*k, self.endpoint()),
                _ => (*k, v.clone()),
            })
            .collect()
    }
}
