// The kafkajs interop client: same commands, record scheme and JSON as
// interop/python/kafka_client.py (see interop/README.md). Codecs: gzip is
// built into kafkajs; snappy comes from kafkajs-snappy (snappyjs), lz4 from
// lz4js and zstd from zstd-codec (all pure JS or wasm, no native build).
'use strict'

const fs = require('fs')
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const lz4 = require('lz4js')
const { ZstdCodec } = require('zstd-codec')

const FILLER_BYTES = 56
const FILLER_POOL = Buffer.concat([Buffer.from([...Array(256).keys()]), Buffer.from([...Array(256).keys()])])
const HEADER_KEY = 'kelp-key'

const CRC_TABLE = (() => {
  const t = new Int32Array(256)
  for (let n = 0; n < 256; n++) {
    let c = n
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
    t[n] = c
  }
  return t
})()

// CRC-32 (IEEE), the same as Python's zlib.crc32.
function crc32 (buf) {
  let c = -1
  for (let i = 0; i < buf.length; i++) c = CRC_TABLE[(c ^ buf[i]) & 0xff] ^ (c >>> 8)
  return (c ^ -1) >>> 0
}

const recordKey = (seq, keys) => Buffer.from(`k${seq % keys}`)

function recordValue (seq) {
  const v = Buffer.allocUnsafe(8 + FILLER_BYTES)
  v.writeBigUInt64BE(BigInt(seq), 0)
  const start = seq % 256
  FILLER_POOL.copy(v, 8, start, start + FILLER_BYTES)
  return v
}

function zstdCodec () {
  const ready = new Promise(resolve => ZstdCodec.run(z => resolve(z)))
  return () => ({
    async compress (encoder) {
      const z = await ready
      return Buffer.from(new z.Simple().compress(encoder.buffer, 3))
    },
    async decompress (buffer) {
      const z = await ready
      // Streaming: a frame need not declare its content size.
      const out = new z.Streaming().decompress(buffer)
      if (!out) throw new Error('zstd: bad frame')
      return Buffer.from(out)
    }
  })
}

const lz4Codec = () => ({
  async compress (encoder) { return Buffer.from(lz4.compress(encoder.buffer)) },
  async decompress (buffer) { return Buffer.from(lz4.decompress(buffer)) }
})

CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec
CompressionCodecs[CompressionTypes.LZ4] = lz4Codec
CompressionCodecs[CompressionTypes.ZSTD] = zstdCodec()

const CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
  lz4: CompressionTypes.LZ4,
  zstd: CompressionTypes.ZSTD
}

class Ledger {
  constructor (expect, keys, seenFile) {
    this.expect = expect
    this.keys = keys
    this.seen = expect ? new Uint8Array(expect) : null
    this.consumed = 0
    this.unique = 0
    this.duplicates = 0
    this.corrupt = 0
    this.orderViolations = 0
    this.checksum = 0
    this.lastSeqPerKey = new Map()
    this.firstOffset = new Map()
    this.nextOffset = new Map()
    this.seenOut = seenFile ? fs.openSync(seenFile, 'a') : null
    this.seenBuf = []
  }

  add (partition, offset, key, value, headerValue) {
    this.consumed++
    if (!this.firstOffset.has(partition)) {
      this.firstOffset.set(partition, offset)
      emit({ event: 'first', partition, offset })
    }
    this.nextOffset.set(partition, offset + 1)
    if (!value || value.length !== 8 + FILLER_BYTES) { this.corrupt++; return }
    const seq = Number(value.readBigUInt64BE(0))
    const wantKey = recordKey(seq, this.keys)
    if (!value.equals(recordValue(seq)) || !key || !key.equals(wantKey) ||
        !headerValue || !Buffer.from(headerValue).equals(wantKey)) {
      this.corrupt++
      return
    }
    if (this.seenOut !== null) {
      const b = Buffer.allocUnsafe(8)
      b.writeBigUInt64LE(BigInt(seq))
      this.seenBuf.push(b)
    }
    if (this.seen) {
      if (seq >= this.expect) { this.corrupt++; return }
      if (this.seen[seq]) { this.duplicates++; return }
      this.seen[seq] = 1
    }
    this.unique++
    this.checksum += crc32(value)
    const k = wantKey.toString()
    const last = this.lastSeqPerKey.has(k) ? this.lastSeqPerKey.get(k) : -1
    if (seq <= last) this.orderViolations++
    this.lastSeqPerKey.set(k, seq)
  }

  flushSeen () {
    if (this.seenOut !== null && this.seenBuf.length) {
      fs.writeSync(this.seenOut, Buffer.concat(this.seenBuf))
      this.seenBuf = []
    }
  }

  summary () {
    this.flushSeen()
    if (this.seenOut !== null) fs.closeSync(this.seenOut)
    const obj = m => Object.fromEntries([...m.entries()].sort((a, b) => a[0] - b[0]).map(([p, o]) => [String(p), o]))
    const out = {
      consumed: this.consumed,
      unique: this.unique,
      duplicates: this.duplicates,
      corrupt: this.corrupt,
      order_violations: this.orderViolations,
      checksum: this.checksum,
      first_offset: obj(this.firstOffset),
      next_offset: obj(this.nextOffset)
    }
    if (this.seen) out.missing = this.expect - this.seen.reduce((a, b) => a + b, 0)
    return out
  }
}

const emit = obj => process.stdout.write(JSON.stringify(obj) + '\n')
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

function parseArgs (argv) {
  const args = {
    partitions: 4, count: 0, first_seq: 0, keys: 64, codec: 'none', rate: 0,
    group: 'kelp-interop', client_id: 'kelp-interop', expect: 0, linger_s: 1,
    idle_exit_s: 0, seen_file: null, until_stdin_closes: false
  }
  args.command = argv[0]
  for (let i = 1; i < argv.length; i++) {
    const name = argv[i].replace(/^--/, '').replace(/-/g, '_')
    if (name === 'until_stdin_closes') { args.until_stdin_closes = true; continue }
    const v = argv[++i]
    if (v === undefined) throw new Error(`--${name}: missing value`)
    args[name] = ['bootstrap', 'topic', 'codec', 'group', 'client_id', 'seen_file', 'client', 'sasl_mechanism'].includes(name) ? v : Number(v)
    if (typeof args[name] === 'number' && Number.isNaN(args[name])) throw new Error(`--${name}: not a number: ${v}`)
  }
  for (const need of ['bootstrap', 'topic', 'timeout_s']) {
    if (args[need] === undefined) throw new Error(`--${need.replace(/_/g, '-')} is required`)
  }
  if (!(args.codec in CODECS)) throw new Error(`unknown codec ${args.codec}`)
  return args
}

function stdinClosed (watch) {
  const state = { closed: false }
  if (watch) {
    process.stdin.on('data', () => {})
    process.stdin.on('end', () => { state.closed = true })
    process.stdin.resume()
  }
  return state
}

// `--sasl-mechanism PLAIN|SCRAM-SHA-256|SCRAM-SHA-512`: authenticate as
// KELP_USER with KELP_PASSWORD.
function saslFor (args) {
  if (!args.sasl_mechanism) return undefined
  return {
    mechanism: args.sasl_mechanism.toLowerCase(),
    username: process.env.KELP_USER || '',
    password: process.env.KELP_PASSWORD || ''
  }
}

function kafkaFor (args) {
  return new Kafka({
    clientId: args.client_id,
    brokers: [args.bootstrap],
    sasl: saslFor(args),
    logLevel: logLevel.ERROR,
    // stdout carries this program's JSON only.
    logCreator: () => ({ namespace, level, log }) => {
      process.stderr.write(`kafkajs ${namespace} ${log.message}\n`)
    },
    retry: { retries: 20, initialRetryTime: 200, maxRetryTime: 2000 }
  })
}

async function createTopic (args) {
  const admin = kafkaFor(args).admin()
  await admin.connect()
  await admin.createTopics({ topics: [{ topic: args.topic, numPartitions: args.partitions }], waitForLeaders: true })
  const meta = await admin.fetchTopicMetadata({ topics: [args.topic] })
  await admin.disconnect()
  return { topic: args.topic, partitions: meta.topics[0].partitions.length }
}

async function produce (args, deadline) {
  const stop = stdinClosed(args.until_stdin_closes)
  const producer = kafkaFor(args).producer({ idempotent: true, maxInFlightRequests: 1 })
  await producer.connect()
  const started = Date.now()
  const state = { produced: 0, acked: 0, failed: 0, checksum: 0, last_error: null }
  const batchRecords = args.rate > 0 ? Math.max(1, Math.min(1000, Math.round(args.rate / 20))) : 5000
  let seq = args.first_seq
  const end = args.first_seq + args.count
  while (seq < end && !stop.closed && Date.now() < deadline) {
    if (args.rate > 0) {
      const ahead = (seq - args.first_seq) / args.rate * 1000 - (Date.now() - started)
      if (ahead > 0) await sleep(ahead)
    }
    const messages = []
    let sum = 0
    for (let n = 0; n < batchRecords && seq < end; n++, seq++) {
      const key = recordKey(seq, args.keys)
      const value = recordValue(seq)
      sum += crc32(value)
      messages.push({ key, value, headers: { [HEADER_KEY]: key } })
    }
    state.produced += messages.length
    try {
      await producer.send({ topic: args.topic, acks: -1, compression: CODECS[args.codec], messages })
      state.acked += messages.length
      state.checksum += sum
    } catch (err) {
      state.failed += messages.length
      state.last_error = String(err)
    }
  }
  await producer.disconnect()
  return { ...state, unacked: 0, seconds: (Date.now() - started) / 1000 }
}

async function consume (args, deadline) {
  const stop = stdinClosed(args.until_stdin_closes)
  const ledger = new Ledger(args.expect, args.keys, args.seen_file)
  const consumer = kafkaFor(args).consumer({
    groupId: args.group, sessionTimeout: 10000, heartbeatInterval: 1000, rebalanceTimeout: 30000
  })
  let lastRecord = null
  const { GROUP_JOIN } = consumer.events
  consumer.on(GROUP_JOIN, e => {
    const parts = (e.payload.memberAssignment[args.topic] || []).slice().sort((a, b) => a - b)
    // The idle clock (--idle-exit-s) starts at the first assignment.
    if (lastRecord === null) lastRecord = Date.now()
    emit({ event: 'assigned', partitions: parts })
  })
  await consumer.connect()
  await consumer.subscribe({ topic: args.topic, fromBeginning: true })
  const started = Date.now()
  let doneAt = null
  await consumer.run({
    autoCommit: true,
    autoCommitInterval: 500,
    eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
      for (const m of batch.messages) {
        const h = m.headers ? m.headers[HEADER_KEY] : null
        ledger.add(batch.partition, Number(m.offset), m.key, m.value, Array.isArray(h) ? h[0] : h)
        resolveOffset(m.offset)
      }
      ledger.flushSeen()
      lastRecord = Date.now()
      await heartbeat()
    }
  })
  for (;;) {
    const now = Date.now()
    if (now >= deadline || stop.closed) break
    if (args.expect && ledger.unique >= args.expect && doneAt === null) doneAt = now
    if (doneAt !== null && now - doneAt >= args.linger_s * 1000) break
    if (args.idle_exit_s && lastRecord && now - lastRecord >= args.idle_exit_s * 1000) break
    await sleep(100)
  }
  const timedOut = Date.now() >= deadline
  // disconnect() stops the run loop, commits resolved offsets and leaves the group.
  await consumer.disconnect()
  return { ...ledger.summary(), event: 'summary', timed_out: timedOut, seconds: (Date.now() - started) / 1000 }
}

async function committed (args) {
  const admin = kafkaFor(args).admin()
  await admin.connect()
  const got = await admin.fetchOffsets({ groupId: args.group, topics: [args.topic] })
  await admin.disconnect()
  const out = {}
  for (const t of got) {
    for (const p of t.partitions) {
      if (Number(p.offset) >= 0) out[String(p.partition)] = Number(p.offset)
    }
  }
  return { committed: out }
}

async function main () {
  const args = parseArgs(process.argv.slice(2))
  const deadline = Date.now() + args.timeout_s * 1000
  const commands = { 'create-topic': createTopic, produce, consume, committed }
  const command = commands[args.command]
  if (!command) throw new Error(`unknown command ${args.command}`)
  const timer = setTimeout(() => {
    emit({ client: 'kafkajs', timed_out: true, error: 'hard deadline' })
    process.exit(1)
  }, args.timeout_s * 1000 + 10000)
  const out = await command(args, deadline)
  clearTimeout(timer)
  if (out.timed_out === undefined) out.timed_out = Date.now() >= deadline
  out.client = 'kafkajs'
  emit(out)
  process.exit(out.timed_out ? 1 : 0)
}

main().catch(err => {
  process.stderr.write(`kafka_client.js: ${err && err.stack ? err.stack : err}\n`)
  process.exit(2)
})
