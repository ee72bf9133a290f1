//! The schema files: one per Kafka API, its request and response with
//! every field, read from JSON and checked into the typed [`Api`] the
//! generator emits from.
//!
//! Owns: the file format (docs/kafka.md, "The message schema", describes it
//! field by field) and every rule a schema must keep for the generated code
//! to compile and to encode what the field lists say. Every refusal is a
//! [`SchemaError`] naming the file and the struct and field. It must never
//! let a schema through whose generated code would disagree with it.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::versions::{Versions, VersionsError};

/// Why a schema file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// The file or the directory could not be read.
    #[error("{file}: {source}")]
    Read {
        /// The file or directory.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not JSON of the schema's shape (a missing or unknown
    /// key, a value of the wrong kind).
    #[error("{file}: {source}")]
    Json {
        /// The file.
        file: PathBuf,
        /// What serde_json said, with line and column.
        source: serde_json::Error,
    },
    /// A version range that does not parse.
    #[error("{file}: {place}: bad version range {text:?}: {why}")]
    BadVersions {
        /// The file.
        file: PathBuf,
        /// `Struct.field` or the top-level key.
        place: String,
        /// The text as written.
        text: String,
        /// What is wrong with it.
        why: VersionsError,
    },
    /// A field type that is not one of the schema's types.
    #[error("{file}: {place}: unknown type {ty:?} (expected int8, int16, int32, int64, bool, uuid, string, bytes, records, or [element] of one of them or of a struct)")]
    UnknownType {
        /// The file.
        file: PathBuf,
        /// `Struct.field`.
        place: String,
        /// The type as written.
        ty: String,
    },
    /// Versions that lie (wholly or partly) outside the versions they must
    /// be within: a field outside its message's or its array's, a nullable
    /// or tagged range outside its field's.
    #[error("{file}: {place}: versions {versions} are outside {within} ({outer})")]
    OutsideVersions {
        /// The file.
        file: PathBuf,
        /// `Struct.field`.
        place: String,
        /// The field's (or its nullable or tagged) versions.
        versions: Versions,
        /// What they must be within.
        within: String,
        /// Those versions.
        outer: Versions,
    },
    /// Any other broken rule, said in words.
    #[error("{file}: {place}: {problem}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// `Struct.field`, or what else the rule is about.
        place: String,
        /// The rule broken.
        problem: String,
    },
}

/// One Kafka API: its key, versions and both messages.
#[derive(Debug, Clone, PartialEq)]
pub struct Api {
    /// The API's name in CamelCase (`ListOffsets`); its `ApiKey` variant.
    pub name: String,
    /// The module the messages go in (`list_offsets`), the file's stem.
    pub module: String,
    /// The key on the wire.
    pub key: i16,
    /// What the API does, one sentence (the `ApiKey` variant's doc).
    pub about: String,
    /// More for the module's doc, if anything.
    pub notes: Option<String>,
    /// The supported versions.
    pub versions: Versions,
    /// The flexible versions (open-ended, or none).
    pub flexible: Versions,
    /// Named constants of the module.
    pub constants: Vec<Constant>,
    /// The request body.
    pub request: Struct,
    /// The response body.
    pub response: Struct,
}

/// A named integer constant, declared in the module and usable as a
/// field's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constant {
    /// SCREAMING_SNAKE name.
    pub name: String,
    /// Its type.
    pub ty: Int,
    /// Its value.
    pub value: i64,
    /// Its doc.
    pub about: String,
}

/// A message body or an array element: a Rust struct.
#[derive(Debug, Clone, PartialEq)]
pub struct Struct {
    /// CamelCase name.
    pub name: String,
    /// Its doc.
    pub about: String,
    /// Whether the Rust type is `Copy`.
    pub copy: bool,
    /// Its fields, in wire order (aliases included).
    pub fields: Vec<Field>,
    /// Whether it borrows from the decoded buffer (holds `records`, itself
    /// or in an element), so the Rust type has a lifetime.
    pub borrows: bool,
}

/// One entry of a struct's field list.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// snake_case name.
    pub name: String,
    /// Its doc.
    pub about: String,
    /// The versions it is on the wire in.
    pub versions: Versions,
    /// A value of its own, or another field in an older layout.
    pub body: FieldBody,
}

/// What a field is.
#[derive(Debug, Clone, PartialEq)]
pub enum FieldBody {
    /// A struct field of its own.
    Value(ValueField),
    /// No struct field: in its versions, the wire carries (part of) a
    /// later array field of the same struct in an older layout.
    Alias(Alias),
}

/// A field that is a struct field.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueField {
    /// Its type.
    pub ty: Type,
    /// The versions in which it may be null; when not empty the Rust type
    /// is an `Option`.
    pub nullable: Versions,
    /// The tag, when the field travels in the tagged-field buffer (then
    /// only there, in all its versions).
    pub tag: Option<u32>,
    /// Its value when absent, and in `Default`.
    pub default: DefaultValue,
    /// When set, decoding a version without this field copies the named
    /// earlier field instead of taking the default.
    pub default_from: Option<String>,
}

/// A field's default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DefaultValue {
    /// The type's own: 0, false, empty, null, the zero UUID.
    Zero,
    /// An integer, literal or a named constant of the module.
    Int {
        /// The value.
        value: i64,
        /// The constant it was written as, if any.
        constant: Option<String>,
    },
    /// A boolean.
    Bool(bool),
    /// An empty array for a nullable array (not null).
    EmptyArray,
}

/// The older layout of an array field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alias {
    /// The array field carried.
    pub target: String,
    /// How much of it.
    pub form: AliasForm,
    /// For struct elements, the element's fields carried, in wire order.
    pub only: Vec<String>,
}

/// How much of its array an alias carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AliasForm {
    /// Its first element only, inline (decoding makes a one-element
    /// array; encoding an empty array writes a default element).
    First,
    /// Every element, each as only the fields named, with no tagged-field
    /// buffer of its own.
    Each,
}

/// A field's type.
#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    /// A single value.
    Scalar(Scalar),
    /// An array.
    Array(Element),
}

/// An array's element.
#[derive(Debug, Clone, PartialEq)]
pub enum Element {
    /// A single value.
    Scalar(Scalar),
    /// A struct.
    Struct(Box<Struct>),
}

/// The types of single values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    /// A big-endian integer.
    Int(Int),
    /// One byte.
    Bool,
    /// 16 bytes.
    Uuid,
    /// A length-prefixed UTF-8 string, owned.
    String,
    /// Length-prefixed bytes, owned.
    Bytes,
    /// Length-prefixed record batches, borrowed from the decoded buffer.
    Records,
}

/// The integer widths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int {
    /// INT8.
    Int8,
    /// INT16.
    Int16,
    /// INT32.
    Int32,
    /// INT64.
    Int64,
}

impl Int {
    /// The Rust type.
    pub fn rust(self) -> &'static str {
        match self {
            Int::Int8 => "i8",
            Int::Int16 => "i16",
            Int::Int32 => "i32",
            Int::Int64 => "i64",
        }
    }

    fn range(self) -> (i64, i64) {
        match self {
            Int::Int8 => (i8::MIN.into(), i8::MAX.into()),
            Int::Int16 => (i16::MIN.into(), i16::MAX.into()),
            Int::Int32 => (i32::MIN.into(), i32::MAX.into()),
            Int::Int64 => (i64::MIN, i64::MAX),
        }
    }

    fn parse(name: &str) -> Option<Int> {
        Some(match name {
            "int8" => Int::Int8,
            "int16" => Int::Int16,
            "int32" => Int::Int32,
            "int64" => Int::Int64,
            _ => return None,
        })
    }
}

impl Scalar {
    fn parse(name: &str) -> Option<Scalar> {
        Some(match name {
            "bool" => Scalar::Bool,
            "uuid" => Scalar::Uuid,
            "string" => Scalar::String,
            "bytes" => Scalar::Bytes,
            "records" => Scalar::Records,
            _ => Scalar::Int(Int::parse(name)?),
        })
    }

    /// Whether the Rust type is `Copy`.
    pub fn is_copy(self) -> bool {
        !matches!(self, Scalar::String | Scalar::Bytes)
    }

    /// Whether a null can stand for it on the wire.
    fn has_null(self) -> bool {
        matches!(self, Scalar::String | Scalar::Bytes | Scalar::Records)
    }
}

impl Type {
    /// Whether the Rust type is `Copy` (arrays never are).
    fn is_copy(&self) -> bool {
        matches!(self, Type::Scalar(s) if s.is_copy())
    }

    fn borrows(&self) -> bool {
        match self {
            Type::Scalar(s) | Type::Array(Element::Scalar(s)) => *s == Scalar::Records,
            Type::Array(Element::Struct(s)) => s.borrows,
        }
    }
}

impl Struct {
    /// The field named `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

impl Field {
    /// The value part, unless the field is an alias.
    pub fn value(&self) -> Option<&ValueField> {
        match &self.body {
            FieldBody::Value(v) => Some(v),
            FieldBody::Alias(_) => None,
        }
    }
}

/// Names the generated code uses for its own variables; a field may not
/// take one.
const RESERVED_NAMES: &[&str] = &[
    "r", "w", "f", "version", "tag", "field", "item", "none", "tagged", "buffers", "as", "break",
    "const", "continue", "crate", "else", "enum", "extern", "false", "fn", "for", "if", "impl",
    "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "self", "static",
    "struct", "super", "trait", "true", "type", "unsafe", "use", "where", "while", "async",
    "await", "dyn", "abstract", "become", "box", "do", "final", "macro", "override", "priv",
    "typeof", "unsized", "virtual", "yield", "try", "gen",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawApi {
    api: String,
    key: i16,
    about: String,
    versions: String,
    flexible: String,
    #[serde(default)]
    notes: Option<String>,
    #[serde(default)]
    constants: Vec<RawConstant>,
    request: RawStruct,
    response: RawStruct,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConstant {
    name: String,
    #[serde(rename = "type")]
    ty: String,
    value: i64,
    about: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStruct {
    #[serde(default)]
    name: Option<String>,
    about: String,
    #[serde(default)]
    copy: bool,
    fields: Vec<RawField>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawField {
    name: String,
    about: String,
    #[serde(default, rename = "type")]
    ty: Option<String>,
    #[serde(default)]
    versions: Option<String>,
    #[serde(default)]
    nullable: Option<String>,
    #[serde(default)]
    tag: Option<u32>,
    #[serde(default)]
    default: Option<Value>,
    #[serde(default)]
    default_from: Option<String>,
    #[serde(default, rename = "struct")]
    structure: Option<RawStruct>,
    #[serde(default)]
    first_of: Option<String>,
    #[serde(default)]
    each_of: Option<String>,
    #[serde(default)]
    only: Option<Vec<String>>,
}

/// Reads every `*.json` in `dir` and returns the APIs in api-key order.
pub fn load_dir(dir: &Path) -> Result<Vec<Api>, SchemaError> {
    let read_dir_error = |source| SchemaError::Read {
        file: dir.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_dir_error)? {
        let path = entry.map_err(read_dir_error)?.path();
        if path.extension().is_some_and(|e| e == "json") {
            files.push(path);
        }
    }
    files.sort();
    let mut apis: Vec<Api> = Vec::with_capacity(files.len());
    for file in &files {
        let text = std::fs::read_to_string(file).map_err(|source| SchemaError::Read {
            file: file.clone(),
            source,
        })?;
        let api = parse(file, &text)?;
        if let Some(other) = apis.iter().find(|a| a.key == api.key) {
            return Err(SchemaError::Invalid {
                file: file.clone(),
                place: "key".into(),
                problem: format!("api key {} is also {}'s", api.key, other.name),
            });
        }
        apis.push(api);
    }
    apis.sort_by_key(|a| a.key);
    Ok(apis)
}

/// Parses and checks one schema file's text; `file` names it in errors
/// and its stem must be the API's module name.
pub fn parse(file: &Path, text: &str) -> Result<Api, SchemaError> {
    let raw: RawApi = serde_json::from_str(text).map_err(|source| SchemaError::Json {
        file: file.to_owned(),
        source,
    })?;
    Checker { file }.api(raw)
}

/// Checks raw schema values; carries the file for its errors.
struct Checker<'p> {
    file: &'p Path,
}

impl Checker<'_> {
    fn invalid(&self, place: &str, problem: impl Into<String>) -> SchemaError {
        SchemaError::Invalid {
            file: self.file.to_owned(),
            place: place.to_owned(),
            problem: problem.into(),
        }
    }

    fn versions(&self, place: &str, text: &str) -> Result<Versions, SchemaError> {
        Versions::parse(text).map_err(|why| SchemaError::BadVersions {
            file: self.file.to_owned(),
            place: place.to_owned(),
            text: text.to_owned(),
            why,
        })
    }

    fn within(
        &self,
        place: &str,
        versions: Versions,
        within: &str,
        outer: Versions,
    ) -> Result<(), SchemaError> {
        if versions.is_within(outer) {
            Ok(())
        } else {
            Err(SchemaError::OutsideVersions {
                file: self.file.to_owned(),
                place: place.to_owned(),
                versions,
                within: within.to_owned(),
                outer,
            })
        }
    }

    fn api(&self, raw: RawApi) -> Result<Api, SchemaError> {
        if !is_camel_case(&raw.api) {
            return Err(self.invalid("api", format!("{:?} is not a CamelCase name", raw.api)));
        }
        let module = snake_case(&raw.api);
        if self.file.file_stem().is_some_and(|s| *s != *module) {
            return Err(self.invalid(
                "api",
                format!("the file of API {} must be named {module}.json", raw.api),
            ));
        }
        if raw.key < 0 {
            return Err(self.invalid("key", format!("{} is negative", raw.key)));
        }
        let versions = self.versions("versions", &raw.versions)?;
        if versions.is_empty() {
            return Err(self.invalid("versions", "an API needs at least one version"));
        }
        let flexible = self.versions("flexible", &raw.flexible)?;
        if !flexible.is_empty() && !flexible.is_open() {
            return Err(self.invalid(
                "flexible",
                "flexible versions run from one version up (\"N+\") or are \"none\"",
            ));
        }
        let constants = raw
            .constants
            .into_iter()
            .map(|c| self.constant(c))
            .collect::<Result<Vec<_>, _>>()?;
        let api = ApiContext {
            versions,
            flexible,
            constants: &constants,
        };
        let mut names = HashSet::new();
        let request = self.message(&api, raw.request, &mut names, "request")?;
        let response = self.message(&api, raw.response, &mut names, "response")?;
        Ok(Api {
            name: raw.api,
            module,
            key: raw.key,
            about: raw.about,
            notes: raw.notes,
            versions,
            flexible,
            constants,
            request,
            response,
        })
    }

    fn constant(&self, raw: RawConstant) -> Result<Constant, SchemaError> {
        let place = format!("constant {}", raw.name);
        let valid_name = !raw.name.is_empty()
            && raw.name.starts_with(|c: char| c.is_ascii_uppercase())
            && raw
                .name
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
        if !valid_name {
            return Err(self.invalid(&place, "a constant's name is SCREAMING_SNAKE_CASE"));
        }
        let Some(ty) = Int::parse(&raw.ty) else {
            return Err(self.invalid(&place, format!("type {:?} is not an integer type", raw.ty)));
        };
        let (min, max) = ty.range();
        if !(min..=max).contains(&raw.value) {
            return Err(self.invalid(&place, format!("{} does not fit {}", raw.value, raw.ty)));
        }
        Ok(Constant {
            name: raw.name,
            ty,
            value: raw.value,
            about: raw.about,
        })
    }

    fn message(
        &self,
        api: &ApiContext<'_>,
        raw: RawStruct,
        names: &mut HashSet<String>,
        which: &str,
    ) -> Result<Struct, SchemaError> {
        let Some(name) = raw.name.clone() else {
            return Err(self.invalid(which, "a message needs a \"name\""));
        };
        self.structure(api, raw, name, api.versions, names)
    }

    /// Checks a struct whose code runs in `context` versions.
    fn structure(
        &self,
        api: &ApiContext<'_>,
        raw: RawStruct,
        name: String,
        context: Versions,
        names: &mut HashSet<String>,
    ) -> Result<Struct, SchemaError> {
        if !is_camel_case(&name) {
            return Err(self.invalid(&name, "a struct's name is CamelCase"));
        }
        if !names.insert(name.clone()) {
            return Err(self.invalid(&name, "two structs of this API have this name"));
        }
        let mut seen = HashSet::new();
        for f in &raw.fields {
            let place = format!("{name}.{}", f.name);
            if !is_snake_case(&f.name) {
                return Err(self.invalid(&place, "a field's name is snake_case"));
            }
            if RESERVED_NAMES.contains(&f.name.as_str()) {
                return Err(self.invalid(
                    &place,
                    "the name is a Rust keyword or one the generated code uses itself",
                ));
            }
            if !seen.insert(f.name.as_str()) {
                return Err(self.invalid(&place, "two fields have this name"));
            }
        }
        // The versions each array's elements are read in: the array's own,
        // and those of any alias carrying it in an older layout.
        let mut element_context: Vec<(String, Versions)> = Vec::new();
        for f in &raw.fields {
            let place = format!("{name}.{}", f.name);
            let versions = self.versions(&place, f.versions.as_deref().unwrap_or("0+"))?;
            let target = f.first_of.as_ref().or(f.each_of.as_ref());
            let carried = target.unwrap_or(&f.name).clone();
            let here = versions.intersect(context);
            match element_context.iter_mut().find(|(n, _)| *n == carried) {
                Some((_, v)) => *v = v.hull(here),
                None => element_context.push((carried, here)),
            }
        }
        let mut fields = Vec::with_capacity(raw.fields.len());
        for mut f in raw.fields {
            let place = format!("{name}.{}", f.name);
            let versions = self.versions(&place, f.versions.as_deref().unwrap_or("0+"))?;
            if versions.intersect(context).is_empty() {
                return Err(SchemaError::OutsideVersions {
                    file: self.file.to_owned(),
                    place,
                    versions,
                    within: format!("{name}'s versions"),
                    outer: context,
                });
            }
            let inner = element_context
                .iter()
                .find(|(n, _)| *n == f.name)
                .map_or(versions, |(_, v)| *v);
            let body = if f.first_of.is_some() || f.each_of.is_some() {
                FieldBody::Alias(self.alias(&place, &f)?)
            } else {
                FieldBody::Value(self.value(api, &place, &mut f, versions, inner, names)?)
            };
            fields.push(Field {
                name: f.name,
                about: f.about,
                versions,
                body,
            });
        }
        let out = Struct {
            borrows: fields
                .iter()
                .filter_map(Field::value)
                .any(|v| v.ty.borrows()),
            name,
            about: raw.about,
            copy: raw.copy,
            fields,
        };
        self.cross_field_rules(&out)?;
        Ok(out)
    }

    fn value(
        &self,
        api: &ApiContext<'_>,
        place: &str,
        raw: &mut RawField,
        versions: Versions,
        element_context: Versions,
        names: &mut HashSet<String>,
    ) -> Result<ValueField, SchemaError> {
        if raw.only.is_some() {
            return Err(self.invalid(place, "\"only\" goes with \"first_of\" or \"each_of\""));
        }
        let Some(ty_text) = raw.ty.as_deref() else {
            return Err(self.invalid(place, "a field needs a \"type\""));
        };
        let unknown = || SchemaError::UnknownType {
            file: self.file.to_owned(),
            place: place.to_owned(),
            ty: ty_text.to_owned(),
        };
        let ty = if let Some(inner) = ty_text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            if let Some(s) = Scalar::parse(inner) {
                if raw.structure.is_some() {
                    return Err(self.invalid(place, "\"struct\" goes with an array of a struct"));
                }
                Type::Array(Element::Scalar(s))
            } else if is_camel_case(inner) {
                let Some(raw_struct) = raw.structure.take() else {
                    return Err(self.invalid(place, "an array of a struct needs its \"struct\""));
                };
                if raw_struct.name.is_some() {
                    return Err(self.invalid(
                        place,
                        "an element struct takes its name from the type, not \"name\"",
                    ));
                }
                let s =
                    self.structure(api, raw_struct, inner.to_owned(), element_context, names)?;
                Type::Array(Element::Struct(Box::new(s)))
            } else {
                return Err(unknown());
            }
        } else {
            let s = Scalar::parse(ty_text).ok_or_else(unknown)?;
            if raw.structure.is_some() {
                return Err(self.invalid(place, "\"struct\" goes with an array of a struct"));
            }
            Type::Scalar(s)
        };
        let nullable = match &raw.nullable {
            None => Versions::NONE,
            Some(text) => {
                let nullable = self.versions(place, text)?;
                let can_be_null = match &ty {
                    Type::Scalar(s) => s.has_null(),
                    Type::Array(_) => true,
                };
                if !can_be_null {
                    return Err(
                        self.invalid(place, format!("a value of type {ty_text} cannot be null"))
                    );
                }
                self.within(place, nullable, "the field's versions", versions)?;
                nullable
            }
        };
        if let Some(tag) = raw.tag {
            if tag > i32::MAX as u32 {
                return Err(self.invalid(place, format!("tag {tag} is too large")));
            }
            self.within(place, versions, "the API's flexible versions", api.flexible)?;
        }
        let default = match &raw.default {
            None => DefaultValue::Zero,
            Some(v) => self.default(api, place, &ty, !nullable.is_empty(), v)?,
        };
        if raw.default_from.is_some() && default != DefaultValue::Zero {
            return Err(self.invalid(
                place,
                "a field has a \"default\" or a \"default_from\", not both",
            ));
        }
        Ok(ValueField {
            ty,
            nullable,
            tag: raw.tag,
            default,
            default_from: raw.default_from.clone(),
        })
    }

    fn default(
        &self,
        api: &ApiContext<'_>,
        place: &str,
        ty: &Type,
        nullable: bool,
        value: &Value,
    ) -> Result<DefaultValue, SchemaError> {
        let refused = || {
            self.invalid(
                place,
                format!("default {value} does not suit the field's type"),
            )
        };
        match (ty, value) {
            (Type::Scalar(Scalar::Int(int)), Value::Number(n)) => {
                let value = n.as_i64().ok_or_else(refused)?;
                let (min, max) = int.range();
                if !(min..=max).contains(&value) {
                    return Err(refused());
                }
                Ok(DefaultValue::Int {
                    value,
                    constant: None,
                })
            }
            (Type::Scalar(Scalar::Int(int)), Value::String(name)) => {
                let Some(c) = api.constants.iter().find(|c| c.name == *name) else {
                    return Err(self.invalid(place, format!("no constant {name} in this schema")));
                };
                if c.ty != *int {
                    return Err(
                        self.invalid(place, format!("constant {name} is not a {}", int.rust()))
                    );
                }
                Ok(DefaultValue::Int {
                    value: c.value,
                    constant: Some(name.clone()),
                })
            }
            (Type::Scalar(Scalar::Bool), Value::Bool(b)) => Ok(DefaultValue::Bool(*b)),
            (Type::Array(_), Value::Array(items)) if nullable && items.is_empty() => {
                Ok(DefaultValue::EmptyArray)
            }
            _ => Err(refused()),
        }
    }

    fn alias(&self, place: &str, raw: &RawField) -> Result<Alias, SchemaError> {
        let has_value_keys = raw.ty.is_some()
            || raw.nullable.is_some()
            || raw.tag.is_some()
            || raw.default.is_some()
            || raw.default_from.is_some()
            || raw.structure.is_some();
        if has_value_keys {
            return Err(self.invalid(
                place,
                "an alias (\"first_of\", \"each_of\") takes its type from its array: no \"type\", \"nullable\", \"tag\", \"default\", \"default_from\" or \"struct\"",
            ));
        }
        let (target, form) = match (&raw.first_of, &raw.each_of) {
            (Some(t), None) => (t.clone(), AliasForm::First),
            (None, Some(t)) => (t.clone(), AliasForm::Each),
            _ => {
                return Err(
                    self.invalid(place, "an alias has \"first_of\" or \"each_of\", not both")
                )
            }
        };
        Ok(Alias {
            target,
            form,
            only: raw.only.clone().unwrap_or_default(),
        })
    }

    /// Rules between fields of one struct: aliases and their arrays, tags,
    /// `default_from`, `copy`.
    fn cross_field_rules(&self, s: &Struct) -> Result<(), SchemaError> {
        let mut tags = HashSet::new();
        for (index, field) in s.fields.iter().enumerate() {
            let place = format!("{}.{}", s.name, field.name);
            match &field.body {
                FieldBody::Alias(alias) => self.alias_rules(s, index, field, alias)?,
                FieldBody::Value(value) => {
                    if let Some(tag) = value.tag {
                        if !tags.insert(tag) {
                            return Err(self.invalid(&place, format!("two fields have tag {tag}")));
                        }
                    }
                    if let Some(source) = &value.default_from {
                        let earlier = s.fields[..index]
                            .iter()
                            .find(|f| f.name == *source)
                            .and_then(Field::value);
                        let fits = earlier.is_some_and(|e| {
                            e.ty == value.ty && e.ty.is_copy() && e.nullable.is_empty()
                        });
                        if !fits || !value.nullable.is_empty() {
                            return Err(self.invalid(
                                &place,
                                format!("\"default_from\" must name an earlier non-null field of the same integer or bool type, not {source:?}"),
                            ));
                        }
                    }
                    if s.copy && !value.ty.is_copy() {
                        return Err(self.invalid(
                            &place,
                            "a \"copy\" struct holds only integers, bools, uuids and records",
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    fn alias_rules(
        &self,
        s: &Struct,
        index: usize,
        field: &Field,
        alias: &Alias,
    ) -> Result<(), SchemaError> {
        let place = format!("{}.{}", s.name, field.name);
        let later = s.fields[index + 1..]
            .iter()
            .find(|f| f.name == alias.target);
        let Some(target) = later else {
            return Err(self.invalid(
                &place,
                format!(
                    "the alias's array {:?} must be a later field of {}",
                    alias.target, s.name
                ),
            ));
        };
        let element = match target.value() {
            Some(ValueField {
                ty: Type::Array(element),
                nullable,
                tag: None,
                default: DefaultValue::Zero,
                default_from: None,
            }) if nullable.is_empty() => element,
            _ => {
                return Err(self.invalid(
                    &place,
                    format!(
                        "{:?} is not a plain array (not nullable, not tagged, default empty)",
                        alias.target
                    ),
                ))
            }
        };
        if !field.versions.is_disjoint(target.versions) {
            return Err(self.invalid(
                &place,
                format!(
                    "the alias ({}) and its array ({}) share versions",
                    field.versions, target.versions
                ),
            ));
        }
        let other_alias = s.fields.iter().any(|f| {
            f.name != field.name
                && matches!(&f.body, FieldBody::Alias(a) if a.target == alias.target)
        });
        if other_alias {
            return Err(self.invalid(&place, format!("{:?} has two aliases", alias.target)));
        }
        match element {
            Element::Scalar(_) if alias.only.is_empty() => Ok(()),
            Element::Scalar(_) => Err(self.invalid(
                &place,
                "\"only\" names fields of a struct element; this array's elements are not structs",
            )),
            Element::Struct(_) if alias.only.is_empty() => Err(self.invalid(
                &place,
                "an alias of an array of structs names the fields it carries in \"only\"",
            )),
            Element::Struct(e) => {
                let mut seen = HashSet::new();
                for name in &alias.only {
                    let carried = e.field(name).and_then(Field::value);
                    if carried.is_none_or(|v| v.tag.is_some()) || !seen.insert(name) {
                        return Err(self.invalid(
                            &place,
                            format!(
                                "{name:?} in \"only\" is not an untagged field of {} named once",
                                e.name
                            ),
                        ));
                    }
                }
                Ok(())
            }
        }
    }
}

/// What a struct's check needs of its API.
struct ApiContext<'c> {
    versions: Versions,
    flexible: Versions,
    constants: &'c [Constant],
}

fn is_camel_case(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_uppercase())
        && name.chars().all(|c| c.is_ascii_alphanumeric())
}

fn is_snake_case(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// `ListOffsets` -> `list_offsets`.
pub fn snake_case(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small API using most of the format: a constant default, a
    /// nullable-from-v2 string, a borrowed records field in an array of
    /// structs, a tagged field, an alias of an older layout.
    pub(crate) const TINY: &str = r#"{
      "api": "Tiny",
      "key": 99,
      "about": "a test API.",
      "versions": "0-3",
      "flexible": "2+",
      "constants": [{"name": "NO_EPOCH", "type": "int32", "value": -1, "about": "No epoch."}],
      "request": {
        "name": "TinyRequest",
        "about": "Tiny request.",
        "fields": [
          {"name": "epoch", "type": "int32", "versions": "1+", "default": "NO_EPOCH", "about": "The epoch."},
          {"name": "label", "type": "string", "nullable": "2+", "about": "A label."},
          {"name": "first_part", "versions": "0", "first_of": "parts", "only": ["index"], "about": "v0's one part."},
          {"name": "parts", "type": "[TinyPart]", "versions": "1+", "about": "The parts.", "struct": {
            "about": "One part.",
            "fields": [
              {"name": "index", "type": "int32", "about": "Its index."},
              {"name": "records", "type": "records", "versions": "1+", "nullable": "1+", "about": "Its records."}
            ]
          }}
        ]
      },
      "response": {
        "name": "TinyResponse",
        "about": "Tiny response.",
        "copy": true,
        "fields": [
          {"name": "error_code", "type": "int16", "about": "The error."},
          {"name": "hint", "type": "int16", "versions": "2+", "tag": 0, "about": "A tagged hint."}
        ]
      }
    }"#;

    fn tiny_with(from: &str, to: &str) -> Result<Api, SchemaError> {
        assert!(TINY.contains(from), "{from}");
        parse(Path::new("tiny.json"), &TINY.replacen(from, to, 1))
    }

    fn problem(result: Result<Api, SchemaError>) -> String {
        match result {
            Ok(_) => panic!("the schema was accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_tiny_schema_parses_to_its_model() {
        let api = parse(Path::new("tiny.json"), TINY).expect("parse");
        assert_eq!(
            (api.name.as_str(), api.module.as_str(), api.key),
            ("Tiny", "tiny", 99)
        );
        assert_eq!(api.versions, Versions::new(0, 3));
        assert_eq!(api.flexible, Versions::new(2, i16::MAX));
        assert!(api.request.borrows, "records make the request borrow");
        assert!(!api.response.borrows);
        assert!(api.response.copy);
        let epoch = api
            .request
            .field("epoch")
            .and_then(Field::value)
            .expect("epoch");
        assert_eq!(
            epoch.default,
            DefaultValue::Int {
                value: -1,
                constant: Some("NO_EPOCH".into())
            }
        );
        let alias = &api.request.field("first_part").expect("alias").body;
        assert_eq!(
            *alias,
            FieldBody::Alias(Alias {
                target: "parts".into(),
                form: AliasForm::First,
                only: vec!["index".into()],
            })
        );
        let hint = api
            .response
            .field("hint")
            .and_then(Field::value)
            .expect("hint");
        assert_eq!(hint.tag, Some(0));
        // An omitted "versions" is every version.
        assert_eq!(
            api.request.field("label").expect("label").versions,
            Versions::ALL
        );
    }

    #[test]
    fn a_bad_version_range_names_the_file_and_field() {
        let e = problem(tiny_with(
            r#""versions": "1+", "default""#,
            r#""versions": "3-1", "default""#,
        ));
        assert_eq!(
            e,
            "tiny.json: TinyRequest.epoch: bad version range \"3-1\": the last version is below the first"
        );
        let e = problem(tiny_with(r#""versions": "0-3""#, r#""versions": "zero+""#));
        assert!(
            e.starts_with("tiny.json: versions: bad version range \"zero+\""),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_type_is_refused() {
        let e = problem(tiny_with(
            r#""type": "int16", "about": "The error.""#,
            r#""type": "int33", "about": "The error.""#,
        ));
        assert!(
            e.starts_with("tiny.json: TinyResponse.error_code: unknown type \"int33\""),
            "{e}"
        );
        let e = problem(tiny_with("[TinyPart]", "[[TinyPart]]"));
        assert!(e.contains("unknown type \"[[TinyPart]]\""), "{e}");
    }

    #[test]
    fn a_field_outside_its_message_or_array_is_refused() {
        // The API has v0-v3; a field only in v5+ is never on the wire.
        let e = problem(tiny_with(
            r#""versions": "1+", "default""#,
            r#""versions": "5+", "default""#,
        ));
        assert_eq!(
            e,
            "tiny.json: TinyRequest.epoch: versions v5+ are outside TinyRequest's versions (v0-v3)"
        );
        // Nullable versions must lie within the field's.
        let e = problem(tiny_with(
            r#""versions": "1+", "nullable": "1+""#,
            r#""versions": "1+", "nullable": "0+""#,
        ));
        assert_eq!(
            e,
            "tiny.json: TinyPart.records: versions v0+ are outside the field's versions (v1+)"
        );
        // A tagged field lies within the flexible versions.
        let e = problem(tiny_with(
            r#""versions": "2+", "tag": 0"#,
            r#""versions": "1+", "tag": 0"#,
        ));
        assert!(
            e.contains("outside the API's flexible versions (v2+)"),
            "{e}"
        );
    }

    #[test]
    fn rules_between_fields_are_kept() {
        // (text of TINY, replaced by, part of the error)
        let cases = [
            // An alias comes before its array, which is a plain array.
            (r#""parts""#, r#""label""#, "must be a later field"),
            (r#""parts""#, r#""nowhere""#, "must be a later field"),
            (
                r#"The parts.""#,
                r#"x", "nullable": "1+""#,
                "is not a plain array",
            ),
            (
                r#""versions": "0","#,
                r#""versions": "0-1","#,
                "share versions",
            ),
            (r#"["index"]"#, r#"["missing"]"#, "\"missing\" in \"only\""),
            (
                r#""NO_EPOCH", "about""#,
                r#""NO_SUCH", "about""#,
                "no constant NO_SUCH",
            ),
            (
                r#""NO_EPOCH", "about""#,
                r#"true, "about""#,
                "does not suit",
            ),
            (
                r#""int16", "about": "The error.""#,
                r#""string", "about": "E""#,
                "a \"copy\" struct",
            ),
            (
                r#"int32", "versions"#,
                r#"int32", "nullable": "1+", "versions"#,
                "int32 cannot be null",
            ),
        ];
        for (from, to, expected) in cases {
            let e = problem(tiny_with(from, to));
            assert!(e.contains(expected), "{to}: {e}");
        }
    }

    #[test]
    fn the_json_shape_and_the_file_name_are_checked() {
        let e = problem(tiny_with(
            r#""about": "The epoch.""#,
            r#""about": "The epoch.", "colour": 1"#,
        ));
        assert!(e.starts_with("tiny.json: unknown field `colour`"), "{e}");
        let e = problem(parse(Path::new("other.json"), TINY));
        assert_eq!(
            e,
            "other.json: api: the file of API Tiny must be named tiny.json"
        );
    }

    #[test]
    fn the_repository_schemas_load_in_key_order() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../schema");
        let apis = load_dir(&dir).expect("kafka/schema/ loads");
        // Every schema file is an API (none skipped).
        let files = std::fs::read_dir(&dir)
            .expect("kafka/schema/")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json"))
            })
            .count();
        assert_eq!(apis.len(), files);
        assert!(apis.len() >= 21, "{} schema files", apis.len());
        assert!(apis.windows(2).all(|w| w[0].key < w[1].key));
        assert_eq!(apis[0].name, "Produce");
    }

    #[test]
    fn snake_case_of_api_names() {
        assert_eq!(snake_case("ListOffsets"), "list_offsets");
        assert_eq!(snake_case("InitProducerId"), "init_producer_id");
        assert_eq!(snake_case("Produce"), "produce");
    }
}
