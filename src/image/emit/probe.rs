//! Probes by name: a static method of another assembly, named the way ILAsm writes a call
//! target — `void [Acme.Probe]Acme.Probe::Enter(string, int32)` — found in the assemblies given
//! as references and checked there (it exists, with that signature, static, public, returning
//! void), then referenced from the image being rewritten.
//!
//! A probe's parameters are filled by type, each meaning one thing: `string` the method's full
//! name (an `ldstr` of a new `#US` entry), `int32` its MethodDef token, `object[]` (at entry) its
//! arguments boxed, `object` (at exit) its return value boxed, or null for a `void` method. Any
//! other parameter type is refused: ilcheck never emits a call whose arguments it cannot type.

use super::{AssemblyIdentity, EmitError, MetadataBuilder};
use crate::image::tables::{Table, Token};
use crate::image::{Image, ImageError};
use thiserror::Error;

/// A parameter or return type of a probe signature (the subset a probe can use).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeType {
    /// `void` (return type only).
    Void,
    /// `string`.
    String,
    /// `int32`.
    Int32,
    /// `object`.
    Object,
    /// `T[]`.
    Array(Box<ProbeType>),
}

impl ProbeType {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            ProbeType::Void => out.push(0x01),
            ProbeType::String => out.push(0x0E),
            ProbeType::Int32 => out.push(0x08),
            ProbeType::Object => out.push(0x1C),
            ProbeType::Array(e) => {
                out.push(0x1D);
                e.encode(out);
            }
        }
    }

    fn name(&self) -> String {
        match self {
            ProbeType::Void => "void".into(),
            ProbeType::String => "string".into(),
            ProbeType::Int32 => "int32".into(),
            ProbeType::Object => "object".into(),
            ProbeType::Array(e) => format!("{}[]", e.name()),
        }
    }
}

/// What a probe's argument is filled with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeArg {
    /// The probed method's full name, as a string literal.
    MethodName,
    /// The probed method's MethodDef token, as an `int32`.
    MethodToken,
    /// The probed method's arguments (not `this`), as an `object[]` of boxed values (entry
    /// probes only).
    Arguments,
    /// The value the probed method returns, boxed, or null when it returns `void` (exit
    /// probes only). In `wrap-finally`'s handler, which also runs when an exception leaves the
    /// method, it is the value stored for the return: the local's default when none was.
    ReturnValue,
}

/// A probe named ILAsm-style, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeRef {
    /// The return type.
    pub ret: ProbeType,
    /// The simple name of the assembly in brackets.
    pub assembly: String,
    /// The type's namespace (empty for the global namespace).
    pub namespace: String,
    /// The type's name.
    pub type_name: String,
    /// The method's name.
    pub method: String,
    /// The parameter types.
    pub params: Vec<ProbeType>,
}

impl ProbeRef {
    /// The MethodDefSig/MethodRefSig blob of a static method with this signature (II.23.2.1).
    pub fn signature(&self) -> Vec<u8> {
        let mut out = vec![0x00, self.params.len() as u8];
        self.ret.encode(&mut out);
        for p in &self.params {
            p.encode(&mut out);
        }
        out
    }
}

impl std::fmt::Display for ProbeRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let params: Vec<String> = self.params.iter().map(ProbeType::name).collect();
        let dot = if self.namespace.is_empty() { "" } else { "." };
        write!(
            f,
            "{} [{}]{}{dot}{}::{}({})",
            self.ret.name(),
            self.assembly,
            self.namespace,
            self.type_name,
            self.method,
            params.join(", ")
        )
    }
}

/// Why a probe cannot be used.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// The text is not of the form `void [Assembly]Namespace.Type::Method(types)`.
    #[error(
        "probe {text:?}: {reason} (expected e.g. 'void [Acme.Probe]Acme.Probe::Enter(string)')"
    )]
    Parse {
        /// The text given.
        text: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// No `--reference` assembly has this simple name.
    #[error(
        "probe {probe}: no reference assembly is named {assembly} (give it with --reference PATH)"
    )]
    NoAssembly {
        /// The probe.
        probe: String,
        /// The assembly named.
        assembly: String,
    },
    /// The assembly has no such type.
    #[error("probe {probe}: {assembly} has no type {type_name}")]
    NoType {
        /// The probe.
        probe: String,
        /// The assembly.
        assembly: String,
        /// The type's full name.
        type_name: String,
    },
    /// The type has no method of that name and signature.
    #[error("probe {probe}: {type_name} has no method {method} with this signature")]
    NoMethod {
        /// The probe.
        probe: String,
        /// The type's full name.
        type_name: String,
        /// The method's name.
        method: String,
    },
    /// The method is not static, not public, or does not return void.
    #[error("probe {probe}: {reason}")]
    Unusable {
        /// The probe.
        probe: String,
        /// Why.
        reason: &'static str,
    },
    /// A parameter type ilcheck cannot fill.
    #[error(
        "probe {probe}: parameter {index} is {found}; a probe takes string (the method's name), int32 (its token), at entry object[] (its arguments) and at exit object (its return value)"
    )]
    Parameter {
        /// The probe.
        probe: String,
        /// The parameter's position (0-based).
        index: usize,
        /// Its type.
        found: String,
    },
    /// A reference assembly could not be read.
    #[error(transparent)]
    Image(#[from] ImageError),
}

/// Parses `ret [assembly]Namespace.Type::Method(params)`.
pub fn parse(text: &str) -> Result<ProbeRef, ProbeError> {
    let fail = |reason| ProbeError::Parse {
        text: text.to_string(),
        reason,
    };
    let t = text.trim();
    let open = t.find('[').ok_or(fail("no [assembly]"))?;
    let ret = parse_type(t[..open].trim()).ok_or(fail("unknown return type"))?;
    let close = t[open..].find(']').ok_or(fail("no ] after the assembly"))? + open;
    let assembly = t[open + 1..close].trim().to_string();
    if assembly.is_empty() {
        return Err(fail("empty assembly name"));
    }
    let rest = &t[close + 1..];
    let colons = rest
        .find("::")
        .ok_or(fail("no :: between type and method"))?;
    let full_type = rest[..colons].trim();
    let (namespace, type_name) = match full_type.rfind('.') {
        Some(i) => (&full_type[..i], &full_type[i + 1..]),
        None => ("", full_type),
    };
    if type_name.is_empty() {
        return Err(fail("empty type name"));
    }
    let after = &rest[colons + 2..];
    let paren = after.find('(').ok_or(fail("no ( after the method name"))?;
    let method = after[..paren].trim();
    if method.is_empty() {
        return Err(fail("empty method name"));
    }
    let inner = after[paren + 1..]
        .strip_suffix(')')
        .ok_or(fail("the parameters do not end with )"))?;
    let mut params = Vec::new();
    for p in inner.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let ty = parse_type(p).ok_or(fail("unknown parameter type"))?;
        if ty == ProbeType::Void {
            return Err(fail("void parameter"));
        }
        params.push(ty);
    }
    if params.len() > 0x7F {
        return Err(fail("too many parameters"));
    }
    Ok(ProbeRef {
        ret,
        assembly,
        namespace: namespace.to_string(),
        type_name: type_name.to_string(),
        method: method.to_string(),
        params,
    })
}

fn parse_type(text: &str) -> Option<ProbeType> {
    if let Some(element) = text.strip_suffix("[]") {
        let e = parse_type(element.trim())?;
        return (e != ProbeType::Void).then(|| ProbeType::Array(Box::new(e)));
    }
    Some(match text {
        "void" => ProbeType::Void,
        "string" => ProbeType::String,
        "int32" => ProbeType::Int32,
        "object" => ProbeType::Object,
        _ => return None,
    })
}

/// A probe found in its assembly: what the image being rewritten needs to reference it, and how
/// to fill each argument.
#[derive(Clone, Debug)]
pub struct ResolvedProbe {
    /// The probe as named.
    pub probe: ProbeRef,
    /// Its assembly's identity, for the AssemblyRef.
    pub identity: AssemblyIdentity,
    /// Its signature blob.
    pub signature: Vec<u8>,
    /// What each argument is.
    pub args: Vec<ProbeArg>,
}

/// MethodAttributes: static, and the member-access mask with its `public` value (II.23.1.10).
const STATIC: u16 = 0x0010;
const ACCESS_MASK: u16 = 0x0007;
const PUBLIC: u16 = 0x0006;

/// Finds `probe` among `references` and checks it can be called as a probe.
/// `at_entry`: the probe runs at method entry, where the arguments can be passed.
pub fn resolve(
    probe: &ProbeRef,
    references: &[Image<'_>],
    at_entry: bool,
) -> Result<ResolvedProbe, ProbeError> {
    let name = probe.to_string();
    let unusable = |reason| ProbeError::Unusable {
        probe: name.clone(),
        reason,
    };
    let mut args = Vec::new();
    for (index, p) in probe.params.iter().enumerate() {
        args.push(match p {
            ProbeType::String => ProbeArg::MethodName,
            ProbeType::Int32 => ProbeArg::MethodToken,
            ProbeType::Array(e) if **e == ProbeType::Object && at_entry => ProbeArg::Arguments,
            ProbeType::Object if !at_entry => ProbeArg::ReturnValue,
            other => {
                return Err(ProbeError::Parameter {
                    probe: name,
                    index,
                    found: other.name(),
                });
            }
        });
    }
    if probe.ret != ProbeType::Void {
        return Err(unusable("a probe returns void"));
    }
    let image = references
        .iter()
        .find(|i| identity(i).is_ok_and(|id| id.name == probe.assembly))
        .ok_or_else(|| ProbeError::NoAssembly {
            probe: name.clone(),
            assembly: probe.assembly.clone(),
        })?;
    let strings = image.strings();
    let tables = image.tables();
    let h = image.tables_header();
    let type_rid = (1..=h.rows(Table::TypeDef))
        .find(|&rid| {
            tables.type_def(rid).is_ok_and(|t| {
                strings.get(t.name).ok() == Some(probe.type_name.as_str())
                    && strings.get(t.namespace).ok() == Some(probe.namespace.as_str())
            })
        })
        .ok_or_else(|| ProbeError::NoType {
            probe: name.clone(),
            assembly: probe.assembly.clone(),
            type_name: format!("{}.{}", probe.namespace, probe.type_name),
        })?;
    let signature = probe.signature();
    let method = image
        .methods()
        .find(|m| {
            m.declaring_type().ok().flatten() == Some(type_rid)
                && m.name().ok() == Some(probe.method.as_str())
                && m.signature_blob().ok() == Some(signature.as_slice())
        })
        .ok_or_else(|| ProbeError::NoMethod {
            probe: name.clone(),
            type_name: format!("{}.{}", probe.namespace, probe.type_name),
            method: probe.method.clone(),
        })?;
    let flags = method.flags();
    if flags & STATIC == 0 {
        return Err(unusable("the method is not static"));
    }
    if flags & ACCESS_MASK != PUBLIC {
        return Err(unusable("the method is not public"));
    }
    Ok(ResolvedProbe {
        probe: probe.clone(),
        identity: identity(image)?,
        signature,
        args,
    })
}

/// The identity of an assembly from its Assembly row (II.22.2): a full public key when it has
/// one (an AssemblyRef may hold the key itself, flagged PublicKey).
pub fn identity(image: &Image<'_>) -> Result<AssemblyIdentity, ImageError> {
    let a = image.tables().assembly(1)?;
    let strings = image.strings();
    let key = image.blobs().get(a.public_key)?.to_vec();
    Ok(AssemblyIdentity {
        name: strings.get(a.name)?.to_string(),
        version: a.version,
        culture: strings.get(a.culture)?.to_string(),
        full_public_key: !key.is_empty(),
        public_key_or_token: key,
    })
}

impl MetadataBuilder<'_, '_> {
    /// The MemberRef token that calls `probe` from this image (AssemblyRef, TypeRef and
    /// MemberRef found or added).
    pub fn probe_ref(&mut self, probe: &ResolvedProbe) -> Result<Token, EmitError> {
        let assembly = self.assembly_ref(&probe.identity)?;
        let ty = self.type_ref(assembly, &probe.probe.namespace, &probe.probe.type_name)?;
        self.member_ref(ty, &probe.probe.method, &probe.signature)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_names_parse_and_print() {
        let p = parse("void [Acme.Probe]Acme.Probe::Enter(string, int32)").unwrap();
        assert_eq!(p.assembly, "Acme.Probe");
        assert_eq!(
            (p.namespace.as_str(), p.type_name.as_str()),
            ("Acme", "Probe")
        );
        assert_eq!(p.method, "Enter");
        assert_eq!(p.params, vec![ProbeType::String, ProbeType::Int32]);
        assert_eq!(p.signature(), vec![0x00, 0x02, 0x01, 0x0E, 0x08]);
        assert_eq!(
            p.to_string(),
            "void [Acme.Probe]Acme.Probe::Enter(string, int32)"
        );
        let q = parse("void [P]Probe::Exit(object[])").unwrap();
        assert_eq!(q.namespace, "");
        assert_eq!(
            q.params,
            vec![ProbeType::Array(Box::new(ProbeType::Object))]
        );
        for bad in [
            "Enter(string)",
            "void [P]::Enter()",
            "void [P]T::(string)",
            "void [P]T::M(float)",
            "void [P]T::M(string",
            "void [P]T::M(void)",
            "int64 [P]T::M()",
        ] {
            assert!(matches!(parse(bad), Err(ProbeError::Parse { .. })), "{bad}");
        }
    }
}
