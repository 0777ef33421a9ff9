//! The execution server's host: a .NET program ilcheck builds itself (no compiler needed) that
//! stays running, reads one request per line on standard input, runs the program it names and
//! answers after the program's own output. It references only mscorlib, so the same bytes run
//! under mono and, through the framework's facades, under CoreCLR.
//!
//! In C# terms the host is:
//!
//! ```text
//! static class Host {
//!     static string Dir; static TextReader In; static TextWriter Out, Err;
//!
//!     // A program's dependencies (a probe assembly beside it): from its directory.
//!     static Assembly Resolve(object sender, ResolveEventArgs e) {
//!         try {
//!             string name = new AssemblyName(e.Name).Name;
//!             string p = Path.Combine(Dir, name + ".dll");
//!             if (!File.Exists(p)) { p = Path.Combine(Dir, name + ".exe"); if (!File.Exists(p)) return null; }
//!             return Assembly.Load(File.ReadAllBytes(p));
//!         } catch (Exception) { return null; }
//!     }
//!
//!     // Loaded from its bytes: a new copy of the program every time, whatever its name; run
//!     // in its directory, as a process of its own is.
//!     static int Run(string path) {
//!         Dir = Path.GetDirectoryName(path);
//!         Environment.CurrentDirectory = Dir;
//!         MethodInfo main = Assembly.Load(File.ReadAllBytes(path)).EntryPoint;
//!         object[] args = main.GetParameters().Length == 0 ? null : new object[] { new string[0] };
//!         object r = main.Invoke(null, args);
//!         return r is int ? (int)r : Environment.ExitCode;
//!     }
//!
//!     static void Main() {
//!         In = Console.In; Out = Console.Out; Err = Console.Error;
//!         AppDomain.CurrentDomain.AssemblyResolve += Resolve;
//!         while (true) {
//!             // A program sees no input (as with stdin from /dev/null) and the real streams.
//!             Console.SetIn(TextReader.Null); Console.SetOut(Out); Console.SetError(Err);
//!             Environment.ExitCode = 0;
//!             string line = In.ReadLine();               // "NONCE PATH"; PATH empty: a ping
//!             if (line == null) return;
//!             int sp = line.IndexOf(' ');
//!             if (sp < 1) return;
//!             string nonce = line.Substring(0, sp), path = line.Substring(sp + 1), status = "ok";
//!             if (path.Length != 0)
//!                 try { int code = Run(path); if (code != 0) status = "exit " + code.ToString(); }
//!                 catch (Exception e) { status = "threw " + e.GetType().ToString(); }
//!             Console.SetOut(Out); Console.SetError(Err);
//!             Out.WriteLine("\n" + nonce + " " + status); Out.Flush();
//!             Err.WriteLine("\n" + nonce); Err.Flush();
//!         }
//!     }
//! }
//! ```
//!
//! Each answer starts on a line of its own whatever the program printed last, and carries the
//! request's nonce, which the program cannot know: output without a final newline, or a line
//! that looks like an answer, cannot be taken for one. See [`server`](super::server) for the
//! other side.

use super::il::Code;
use crate::image::emit::assembly::{
    AssemblyBuilder, ImageKind, SigType, field_sig, flags, locals_sig, method_sig,
};
use crate::image::emit::{AssemblyIdentity, EmitError};
use crate::image::tables::Token;
use crate::opcode::Opcode;

/// The host's assembly name (its file is `ilcheck-host.exe`).
pub const HOST_NAME: &str = "ilcheck-host";

/// Why the host could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostError {
    /// Metadata could not be added.
    #[error("building the execution host: {0}")]
    Emit(#[from] EmitError),
    /// A method could not be laid out.
    #[error("building the execution host: {method}: {source}")]
    Layout {
        /// The host method.
        method: &'static str,
        /// Why.
        source: crate::ir::LayoutError,
    },
}

/// mscorlib's references the host uses.
struct Refs {
    object: Token,
    string: Token,
    int32: Token,
    exception: Token,
    assembly: Token,
    method_info: Token,
    handler_args: Token,
    // Members.
    args_name: Token,
    assembly_name_ctor: Token,
    assembly_name_name: Token,
    concat2: Token,
    concat4: Token,
    combine: Token,
    directory_name: Token,
    exists: Token,
    read_all_bytes: Token,
    load: Token,
    entry_point: Token,
    get_parameters: Token,
    invoke: Token,
    get_exit_code: Token,
    set_current_directory: Token,
    set_exit_code: Token,
    console_in: Token,
    console_out: Token,
    console_error: Token,
    set_in: Token,
    set_out: Token,
    set_error: Token,
    read_line: Token,
    reader_null: Token,
    write_line: Token,
    flush: Token,
    current_domain: Token,
    add_assembly_resolve: Token,
    handler_ctor: Token,
    index_of: Token,
    substring2: Token,
    substring1: Token,
    length: Token,
    int_to_string: Token,
    get_type: Token,
    to_string: Token,
    // Signatures of the host's own fields.
    reader: Token,
    writer: Token,
}

fn refs(b: &mut AssemblyBuilder) -> Result<Refs, EmitError> {
    let corlib = b.assembly_ref(&AssemblyIdentity {
        name: "mscorlib".into(),
        version: [4, 0, 0, 0],
        culture: std::string::String::new(),
        public_key_or_token: vec![0xB7, 0x7A, 0x5C, 0x56, 0x19, 0x34, 0xE0, 0x89],
        full_public_key: false,
    })?;
    let mut t = |ns: &str, name: &str| b.type_ref(corlib, ns, name);
    let object = t("System", "Object")?;
    let string = t("System", "String")?;
    let int32 = t("System", "Int32")?;
    let exception = t("System", "Exception")?;
    let type_ = t("System", "Type")?;
    let console = t("System", "Console")?;
    let environment = t("System", "Environment")?;
    let app_domain = t("System", "AppDomain")?;
    let handler = t("System", "ResolveEventHandler")?;
    let handler_args = t("System", "ResolveEventArgs")?;
    let assembly = t("System.Reflection", "Assembly")?;
    let assembly_name = t("System.Reflection", "AssemblyName")?;
    let method_info = t("System.Reflection", "MethodInfo")?;
    let method_base = t("System.Reflection", "MethodBase")?;
    let parameter_info = t("System.Reflection", "ParameterInfo")?;
    let file = t("System.IO", "File")?;
    let path = t("System.IO", "Path")?;
    let reader = t("System.IO", "TextReader")?;
    let writer = t("System.IO", "TextWriter")?;

    use SigType::*;
    let sig = method_sig;
    let mut m = |parent: Token, name: &str, s: Vec<u8>| b.member_ref(parent, name, &s);
    Ok(Refs {
        object,
        string,
        int32,
        exception,
        assembly,
        method_info,
        handler_args,
        args_name: m(handler_args, "get_Name", sig(true, String, &[])?)?,
        assembly_name_ctor: m(assembly_name, ".ctor", sig(true, Void, &[String])?)?,
        assembly_name_name: m(assembly_name, "get_Name", sig(true, String, &[])?)?,
        concat2: m(string, "Concat", sig(false, String, &[String, String])?)?,
        concat4: m(
            string,
            "Concat",
            sig(false, String, &[String, String, String, String])?,
        )?,
        combine: m(path, "Combine", sig(false, String, &[String, String])?)?,
        directory_name: m(path, "GetDirectoryName", sig(false, String, &[String])?)?,
        exists: m(file, "Exists", sig(false, Boolean, &[String])?)?,
        read_all_bytes: m(file, "ReadAllBytes", sig(false, SzArray(&U1), &[String])?)?,
        load: m(
            assembly,
            "Load",
            sig(false, Class(assembly), &[SzArray(&U1)])?,
        )?,
        entry_point: m(
            assembly,
            "get_EntryPoint",
            sig(true, Class(method_info), &[])?,
        )?,
        get_parameters: m(
            method_base,
            "GetParameters",
            sig(true, ClassSzArray(parameter_info), &[])?,
        )?,
        invoke: m(
            method_base,
            "Invoke",
            sig(true, Object, &[Object, SzArray(&Object)])?,
        )?,
        get_exit_code: m(environment, "get_ExitCode", sig(false, I4, &[])?)?,
        set_exit_code: m(environment, "set_ExitCode", sig(false, Void, &[I4])?)?,
        set_current_directory: m(
            environment,
            "set_CurrentDirectory",
            sig(false, Void, &[String])?,
        )?,
        console_in: m(console, "get_In", sig(false, Class(reader), &[])?)?,
        console_out: m(console, "get_Out", sig(false, Class(writer), &[])?)?,
        console_error: m(console, "get_Error", sig(false, Class(writer), &[])?)?,
        set_in: m(console, "SetIn", sig(false, Void, &[Class(reader)])?)?,
        set_out: m(console, "SetOut", sig(false, Void, &[Class(writer)])?)?,
        set_error: m(console, "SetError", sig(false, Void, &[Class(writer)])?)?,
        read_line: m(reader, "ReadLine", sig(true, String, &[])?)?,
        reader_null: m(reader, "Null", field_sig(Class(reader))?)?,
        write_line: m(writer, "WriteLine", sig(true, Void, &[String])?)?,
        flush: m(writer, "Flush", sig(true, Void, &[])?)?,
        current_domain: m(
            app_domain,
            "get_CurrentDomain",
            sig(false, Class(app_domain), &[])?,
        )?,
        add_assembly_resolve: m(
            app_domain,
            "add_AssemblyResolve",
            sig(true, Void, &[Class(handler)])?,
        )?,
        handler_ctor: m(handler, ".ctor", sig(true, Void, &[Object, IntPtr])?)?,
        index_of: m(string, "IndexOf", sig(true, I4, &[Char])?)?,
        substring2: m(string, "Substring", sig(true, String, &[I4, I4])?)?,
        substring1: m(string, "Substring", sig(true, String, &[I4])?)?,
        length: m(string, "get_Length", sig(true, I4, &[])?)?,
        int_to_string: m(int32, "ToString", sig(true, String, &[])?)?,
        get_type: m(object, "GetType", sig(true, Class(type_), &[])?)?,
        to_string: m(object, "ToString", sig(true, String, &[])?)?,
        reader,
        writer,
    })
}

/// The host's own static fields.
struct Fields {
    dir: Token,
    input: Token,
    out: Token,
    err: Token,
}

fn layout_err(method: &'static str) -> impl Fn(crate::ir::LayoutError) -> HostError {
    move |source| HostError::Layout { method, source }
}

/// `Resolve(object, ResolveEventArgs)`: a dependency from the running program's directory,
/// loaded from its bytes; null when there is none (the runtime then reports it missing).
fn resolve_body(b: &mut AssemblyBuilder, r: &Refs, f: &Fields) -> Result<Vec<u8>, HostError> {
    let locals = b.standalone_sig(&locals_sig(&[
        SigType::String,
        SigType::String,
        SigType::Class(r.assembly),
    ])?)?;
    let (dll, exe) = (b.user_string(".dll")?, b.user_string(".exe")?);
    let mut k = Code::new(8, locals);
    let (try_start, handler, handler_end) = (k.label(), k.label(), k.label());
    let (load, none, end) = (k.label(), k.label(), k.label());
    k.bind(try_start)
        .var(Opcode::Ldarg, 1)
        .tok(Opcode::Callvirt, r.args_name)
        .tok(Opcode::Newobj, r.assembly_name_ctor)
        .tok(Opcode::Callvirt, r.assembly_name_name)
        .var(Opcode::Stloc, 0);
    for (ext, miss) in [(dll, None), (exe, Some(none))] {
        k.tok(Opcode::Ldsfld, f.dir)
            .var(Opcode::Ldloc, 0)
            .tok(Opcode::Ldstr, ext)
            .tok(Opcode::Call, r.concat2)
            .tok(Opcode::Call, r.combine)
            .var(Opcode::Stloc, 1)
            .var(Opcode::Ldloc, 1)
            .tok(Opcode::Call, r.exists);
        match miss {
            None => k.br(Opcode::Brtrue, load),
            Some(none) => k.br(Opcode::Brfalse, none),
        };
    }
    k.bind(load)
        .var(Opcode::Ldloc, 1)
        .tok(Opcode::Call, r.read_all_bytes)
        .tok(Opcode::Call, r.load)
        .var(Opcode::Stloc, 2)
        .br(Opcode::Leave, end)
        .bind(none)
        .br(Opcode::Leave, end);
    k.bind(handler).op(Opcode::Pop).br(Opcode::Leave, end);
    k.bind(handler_end)
        .catch(r.exception, try_start, handler, handler, handler_end);
    k.bind(end).var(Opcode::Ldloc, 2).op(Opcode::Ret);
    k.done().map_err(layout_err("Resolve"))
}

/// `Run(string)`: the program at the path, loaded from its bytes, its entry point invoked in its
/// directory; its exit code.
fn run_body(b: &mut AssemblyBuilder, r: &Refs, f: &Fields) -> Result<Vec<u8>, HostError> {
    let locals = b.standalone_sig(&locals_sig(&[
        SigType::Class(r.method_info),
        SigType::SzArray(&SigType::Object),
        SigType::Object,
    ])?)?;
    let mut k = Code::new(8, locals);
    let (invoke, not_int) = (k.label(), k.label());
    k.var(Opcode::Ldarg, 0)
        .tok(Opcode::Call, r.directory_name)
        .tok(Opcode::Stsfld, f.dir)
        .tok(Opcode::Ldsfld, f.dir)
        .tok(Opcode::Call, r.set_current_directory)
        .var(Opcode::Ldarg, 0)
        .tok(Opcode::Call, r.read_all_bytes)
        .tok(Opcode::Call, r.load)
        .tok(Opcode::Callvirt, r.entry_point)
        .var(Opcode::Stloc, 0)
        .var(Opcode::Ldloc, 0)
        .tok(Opcode::Callvirt, r.get_parameters)
        .op(Opcode::Ldlen)
        .op(Opcode::Conv_I4)
        .br(Opcode::Brfalse, invoke)
        // Main(string[]): an empty array, as a process without arguments gets.
        .i4(1)
        .tok(Opcode::Newarr, r.object)
        .op(Opcode::Dup)
        .i4(0)
        .i4(0)
        .tok(Opcode::Newarr, r.string)
        .op(Opcode::Stelem_Ref)
        .var(Opcode::Stloc, 1);
    k.bind(invoke)
        .var(Opcode::Ldloc, 0)
        .op(Opcode::Ldnull)
        .var(Opcode::Ldloc, 1)
        .tok(Opcode::Callvirt, r.invoke)
        .var(Opcode::Stloc, 2)
        .var(Opcode::Ldloc, 2)
        .tok(Opcode::Isinst, r.int32)
        .br(Opcode::Brfalse, not_int)
        .var(Opcode::Ldloc, 2)
        .tok(Opcode::Unbox_Any, r.int32)
        .op(Opcode::Ret);
    k.bind(not_int)
        .tok(Opcode::Call, r.get_exit_code)
        .op(Opcode::Ret);
    k.done().map_err(layout_err("Run"))
}

/// `Main()`: the request loop.
fn main_body(
    b: &mut AssemblyBuilder,
    r: &Refs,
    f: &Fields,
    resolve: Token,
    run: Token,
) -> Result<Vec<u8>, HostError> {
    let locals = b.standalone_sig(&locals_sig(&[
        SigType::String,             // 0 line
        SigType::I4,                 // 1 sp
        SigType::String,             // 2 nonce
        SigType::String,             // 3 path
        SigType::String,             // 4 status
        SigType::I4,                 // 5 code
        SigType::Class(r.exception), // 6 e
    ])?)?;
    let (s_ok, s_exit, s_threw, s_newline, s_space) = (
        b.user_string("ok")?,
        b.user_string("exit ")?,
        b.user_string("threw ")?,
        b.user_string("\n")?,
        b.user_string(" ")?,
    );
    let mut k = Code::new(8, locals);
    let (top, exit, answer) = (k.label(), k.label(), k.label());
    let (try_start, try_ok, handler, handler_end) = (k.label(), k.label(), k.label(), k.label());
    k.tok(Opcode::Call, r.console_in)
        .tok(Opcode::Stsfld, f.input)
        .tok(Opcode::Call, r.console_out)
        .tok(Opcode::Stsfld, f.out)
        .tok(Opcode::Call, r.console_error)
        .tok(Opcode::Stsfld, f.err)
        .tok(Opcode::Call, r.current_domain)
        .op(Opcode::Ldnull)
        .tok(Opcode::Ldftn, resolve)
        .tok(Opcode::Newobj, r.handler_ctor)
        .tok(Opcode::Callvirt, r.add_assembly_resolve);
    k.bind(top)
        .tok(Opcode::Ldsfld, r.reader_null)
        .tok(Opcode::Call, r.set_in)
        .tok(Opcode::Ldsfld, f.out)
        .tok(Opcode::Call, r.set_out)
        .tok(Opcode::Ldsfld, f.err)
        .tok(Opcode::Call, r.set_error)
        .i4(0)
        .tok(Opcode::Call, r.set_exit_code)
        .tok(Opcode::Ldsfld, f.input)
        .tok(Opcode::Callvirt, r.read_line)
        .var(Opcode::Stloc, 0)
        .var(Opcode::Ldloc, 0)
        .br(Opcode::Brfalse, exit)
        .var(Opcode::Ldloc, 0)
        .i4(i32::from(b' '))
        .tok(Opcode::Callvirt, r.index_of)
        .var(Opcode::Stloc, 1)
        .var(Opcode::Ldloc, 1)
        .i4(1)
        .br(Opcode::Blt, exit)
        .var(Opcode::Ldloc, 0)
        .i4(0)
        .var(Opcode::Ldloc, 1)
        .tok(Opcode::Callvirt, r.substring2)
        .var(Opcode::Stloc, 2)
        .var(Opcode::Ldloc, 0)
        .var(Opcode::Ldloc, 1)
        .i4(1)
        .op(Opcode::Add)
        .tok(Opcode::Callvirt, r.substring1)
        .var(Opcode::Stloc, 3)
        .tok(Opcode::Ldstr, s_ok)
        .var(Opcode::Stloc, 4)
        .var(Opcode::Ldloc, 3)
        .tok(Opcode::Callvirt, r.length)
        .br(Opcode::Brfalse, answer);
    k.bind(try_start)
        .var(Opcode::Ldloc, 3)
        .tok(Opcode::Call, run)
        .var(Opcode::Stloc, 5)
        .var(Opcode::Ldloc, 5)
        .br(Opcode::Brfalse, try_ok)
        .tok(Opcode::Ldstr, s_exit)
        .var(Opcode::Ldloca, 5)
        .tok(Opcode::Call, r.int_to_string)
        .tok(Opcode::Call, r.concat2)
        .var(Opcode::Stloc, 4);
    k.bind(try_ok).br(Opcode::Leave, answer);
    k.bind(handler)
        .var(Opcode::Stloc, 6)
        .tok(Opcode::Ldstr, s_threw)
        .var(Opcode::Ldloc, 6)
        .tok(Opcode::Callvirt, r.get_type)
        .tok(Opcode::Callvirt, r.to_string)
        .tok(Opcode::Call, r.concat2)
        .var(Opcode::Stloc, 4)
        .br(Opcode::Leave, answer);
    k.bind(handler_end)
        .catch(r.exception, try_start, handler, handler, handler_end);
    k.bind(answer)
        .tok(Opcode::Ldsfld, f.out)
        .tok(Opcode::Call, r.set_out)
        .tok(Opcode::Ldsfld, f.err)
        .tok(Opcode::Call, r.set_error)
        .tok(Opcode::Ldsfld, f.out)
        .tok(Opcode::Ldstr, s_newline)
        .var(Opcode::Ldloc, 2)
        .tok(Opcode::Ldstr, s_space)
        .var(Opcode::Ldloc, 4)
        .tok(Opcode::Call, r.concat4)
        .tok(Opcode::Callvirt, r.write_line)
        .tok(Opcode::Ldsfld, f.out)
        .tok(Opcode::Callvirt, r.flush)
        .tok(Opcode::Ldsfld, f.err)
        .tok(Opcode::Ldstr, s_newline)
        .var(Opcode::Ldloc, 2)
        .tok(Opcode::Call, r.concat2)
        .tok(Opcode::Callvirt, r.write_line)
        .tok(Opcode::Ldsfld, f.err)
        .tok(Opcode::Callvirt, r.flush)
        .br(Opcode::Br, top);
    k.bind(exit).op(Opcode::Ret);
    k.done().map_err(layout_err("Main"))
}

/// The host's PE file (`ilcheck-host.exe`); the same bytes every time.
pub fn host_assembly() -> Result<Vec<u8>, HostError> {
    let mut b = AssemblyBuilder::new(HOST_NAME, [1, 0, 0, 0], ImageKind::Exe)?;
    let r = refs(&mut b)?;
    b.type_def(
        flags::TYPE_PUBLIC | flags::TYPE_ABSTRACT | flags::TYPE_SEALED,
        "Ilcheck",
        "Host",
        Some(r.object),
    )?;
    let field = |b: &mut AssemblyBuilder, name: &str, t: SigType| {
        b.field(
            flags::FIELD_PUBLIC | flags::FIELD_STATIC,
            name,
            &field_sig(t)?,
        )
    };
    let f = Fields {
        dir: field(&mut b, "Dir", SigType::String)?,
        input: field(&mut b, "In", SigType::Class(r.reader))?,
        out: field(&mut b, "Out", SigType::Class(r.writer))?,
        err: field(&mut b, "Err", SigType::Class(r.writer))?,
    };
    let statics = flags::METHOD_PUBLIC | flags::METHOD_STATIC | flags::METHOD_HIDE_BY_SIG;
    let body = resolve_body(&mut b, &r, &f)?;
    let resolve = b.method(
        statics,
        "Resolve",
        &method_sig(
            false,
            SigType::Class(r.assembly),
            &[SigType::Object, SigType::Class(r.handler_args)],
        )?,
        &body,
    )?;
    let body = run_body(&mut b, &r, &f)?;
    let run = b.method(
        statics,
        "Run",
        &method_sig(false, SigType::I4, &[SigType::String])?,
        &body,
    )?;
    let body = main_body(&mut b, &r, &f, resolve, run)?;
    let main = b.method(
        statics,
        "Main",
        &method_sig(false, SigType::Void, &[])?,
        &body,
    )?;
    b.set_entry_point(main);
    Ok(b.build()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::Image;

    #[test]
    fn the_host_is_the_same_every_time_and_verifies_clean() {
        let bytes = host_assembly().unwrap();
        assert_eq!(bytes, host_assembly().unwrap());
        let image = Image::parse(&bytes).unwrap();
        assert!(crate::image::integrity::check(&image).is_empty());
        let names: Vec<String> = image.methods().map(|m| m.full_name().unwrap()).collect();
        assert_eq!(
            names,
            [
                "Ilcheck.Host::Resolve(object,class System.ResolveEventArgs)",
                "Ilcheck.Host::Run(string)",
                "Ilcheck.Host::Main()"
            ]
        );
        let mut report = crate::corpus::VerifyReport::default();
        let dir = std::env::temp_dir().join(format!("ilcheck-host-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join("ilcheck-host.exe");
        std::fs::write(&exe, &bytes).unwrap();
        crate::corpus::verify(
            &[crate::corpus::Input::named(&exe)],
            crate::corpus::VerifyOptions::default(),
            None,
            &mut report,
            |_| {},
        );
        let _ = std::fs::remove_dir_all(&dir);
        assert!(report.image_errors.is_empty(), "{:?}", report.image_errors);
        assert!(report.findings.is_empty(), "{:?}", report.findings);
    }
}
