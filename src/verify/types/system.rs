//! The type system over an image and the assemblies it references: TypeRefs resolved through
//! AssemblyRefs and type forwarders, base chains, interfaces, enums' underlying types, generic
//! instantiation, and the assignability and merge rules of III.1.8.1.2–3.
//!
//! References are found by simple name (versions are not compared) in the input's directory,
//! then in the directories the caller gives, then in the runtimes' directories found on the
//! machine. Nothing is guessed: what cannot be found or read is [`TyId::UNKNOWN`], against which
//! every check passes, and the method that met it is checked in part.

use super::fx::{FxMap, FxSet};
use super::ty::{Interner, MethodSig, MethodTy, Prim, TyId, TyNode, TypeKey};
use super::vtype::V;
use crate::image::Image;
use crate::image::sig::{SigReader, element};
use crate::image::tables::{CodedIndex, Table, Token};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex, OnceLock};

/// Deepest nesting of types in a signature, TypeSpec chains and forwarders followed.
const MAX_DEPTH: u32 = 32;
/// Most supertypes visited when asking whether one type is assignable to another.
const MAX_SUPERTYPES: usize = 512;

/// Values by namespace, then name: looked up with the strings a signature or a TypeRef
/// names, without building a key.
type ByName<V> = FxMap<Box<str>, FxMap<Box<str>, V>>;

/// The value of `ns.name` in `map`.
fn by_name<'m, V>(map: &'m ByName<V>, ns: &str, name: &str) -> Option<&'m V> {
    map.get(ns)?.get(name)
}

/// Lazily built indexes of one module's tables.
#[derive(Debug, Default)]
struct ModuleIndex {
    /// Top-level TypeDefs as (hash of namespace and name, rid), sorted: the rids of a hash in
    /// row order, whose names a lookup compares (no key allocated per type).
    top: OnceLock<Vec<(u64, u32)>>,
    /// Nested TypeDefs by enclosing TypeDef, then name.
    nested: OnceLock<FxMap<u32, FxMap<Box<str>, u32>>>,
    /// ExportedTypes by namespace and name: the Implementation token.
    exported: OnceLock<ByName<Token>>,
    /// The interfaces of each TypeDef, from the InterfaceImpl rows in row order.
    interfaces: OnceLock<Runs<Token>>,
    /// The generic parameters of each TypeDef from the GenericParam rows, as (number, flags)
    /// in parameter order.
    generics: OnceLock<Runs<(u16, u16)>>,
    /// Whether the module defines `System.Object` without a base: the core library.
    corlib: OnceLock<bool>,
    /// The enclosing TypeDef of each TypeDef, as [`crate::image::tables::Tables::enclosing_type`]
    /// answers (the first NestedClass row of a type); `None` when that answer is not a table
    /// (the rows do not read, or are marked sorted and are not).
    enclosing: OnceLock<Option<Vec<Option<u32>>>>,
}

impl ModuleIndex {
    /// The first top-level TypeDef named `ns.name`, in row order.
    fn top(&self, img: &Image<'_>, ns: &str, name: &str) -> Option<u32> {
        let t = img.tables();
        let s = img.strings();
        let all = self.top.get_or_init(|| {
            let rows = t.rows(Table::TypeDef);
            // Rows are bounded by the table stream, already read.
            let mut nested = vec![false; rows as usize + 1];
            for r in 1..=t.rows(Table::NestedClass) {
                if let Ok(n) = t.nested_class(r)
                    && let Some(x) = nested.get_mut(n.nested_class as usize)
                {
                    *x = true;
                }
            }
            let mut all = Vec::with_capacity(rows as usize);
            for rid in 1..=rows {
                if nested[rid as usize] {
                    continue;
                }
                // Names that are not UTF-8 are kept too: no lookup (a `str`) matches them.
                if let Ok(row) = t.type_def(rid)
                    && let (Some(ns), Some(name)) =
                        (string_bytes(&s, row.namespace), string_bytes(&s, row.name))
                {
                    all.push((name_hash(ns, name), rid));
                }
            }
            all.sort_unstable();
            all
        });
        let (ns, name) = (ns.as_bytes(), name.as_bytes());
        let h = name_hash(ns, name);
        run_of(all, |&(x, _)| x.cmp(&h))
            .iter()
            .map(|&(_, rid)| rid)
            .find(|&rid| {
                t.type_def(rid).is_ok_and(|row| {
                    string_bytes(&s, row.namespace) == Some(ns)
                        && string_bytes(&s, row.name) == Some(name)
                })
            })
    }

    fn nested(&self, img: &Image<'_>) -> &FxMap<u32, FxMap<Box<str>, u32>> {
        self.nested.get_or_init(|| {
            let t = img.tables();
            let s = img.strings();
            let mut map = FxMap::<u32, FxMap<Box<str>, u32>>::default();
            for r in 1..=t.rows(Table::NestedClass) {
                if let Ok(n) = t.nested_class(r)
                    && let Ok(row) = t.type_def(n.nested_class)
                    && let Ok(name) = s.get(row.name)
                {
                    map.entry(n.enclosing_class)
                        .or_default()
                        .entry(Box::from(name))
                        .or_insert(n.nested_class);
                }
            }
            map
        })
    }

    fn exported(&self, img: &Image<'_>) -> &ByName<Token> {
        self.exported.get_or_init(|| {
            let t = img.tables();
            let s = img.strings();
            let mut map = ByName::default();
            for rid in 1..=t.rows(Table::ExportedType) {
                let (Ok(name), Ok(ns), Ok(imp)) = (
                    t.cell(Table::ExportedType, rid, 2),
                    t.cell(Table::ExportedType, rid, 3),
                    t.cell(Table::ExportedType, rid, 4),
                ) else {
                    continue;
                };
                if let (Ok(ns), Ok(name), Some(imp)) = (
                    s.get(ns),
                    s.get(name),
                    CodedIndex::Implementation.decode(imp),
                ) {
                    insert_by_name(&mut map, ns, name, imp);
                }
            }
            map
        })
    }
    /// The interfaces TypeDef `class` declares, in row order.
    fn interfaces(&self, img: &Image<'_>, class: u32) -> impl Iterator<Item = Token> + '_ {
        let all = self.interfaces.get_or_init(|| {
            let t = img.tables();
            // Rows are bounded by the table stream, already read.
            let rows = (1..=t.rows(Table::InterfaceImpl)).filter_map(|rid| {
                let class = t.cell(Table::InterfaceImpl, rid, 0).ok()?;
                let iface = t.cell(Table::InterfaceImpl, rid, 1).ok()?;
                Some((class, CodedIndex::TypeDefOrRef.decode(iface)?))
            });
            Runs::new(t.rows(Table::TypeDef), rows.collect())
        });
        all.of(class).iter().copied()
    }

    /// The flags of the generic parameters of TypeDef `rid`, in parameter order.
    fn generics(&self, img: &Image<'_>, rid: u32) -> impl Iterator<Item = u16> + '_ {
        let all = self.generics.get_or_init(|| {
            let t = img.tables();
            // Rows are bounded by the table stream, already read. A method's parameters
            // are not asked for here.
            let rows = (1..=t.rows(Table::GenericParam)).filter_map(|rid| {
                let number = t.cell(Table::GenericParam, rid, 0).ok()?;
                let flags = t.cell(Table::GenericParam, rid, 1).ok()?;
                let owner = t.cell(Table::GenericParam, rid, 2).ok()?;
                let owner = CodedIndex::TypeOrMethodDef.decode(owner)?;
                (owner.table() == Some(Table::TypeDef))
                    .then_some((owner.rid(), (number as u16, flags as u16)))
            });
            let mut rows: Vec<_> = rows.collect();
            // In parameter order whatever the row order (then by flags, as a total order).
            rows.sort_unstable();
            Runs::new(t.rows(Table::TypeDef), rows)
        });
        all.of(rid).iter().map(|&(_, f)| f)
    }

    /// The TypeDef enclosing TypeDef `rid`, as `Tables::enclosing_type` answers (an error
    /// as none), from a table built once instead of a search per type.
    fn enclosing(&self, img: &Image<'_>, rid: u32) -> Option<u32> {
        let t = img.tables();
        let by_type = self.enclosing.get_or_init(|| {
            // Rows are bounded by the table stream, already read.
            let mut by_type = vec![None; t.rows(Table::TypeDef) as usize + 1];
            let (mut last, mut sorted) = (0, true);
            for r in 1..=t.rows(Table::NestedClass) {
                let (Ok(nested), Ok(outer)) = (
                    t.cell(Table::NestedClass, r, 0),
                    t.cell(Table::NestedClass, r, 1),
                ) else {
                    return None;
                };
                sorted &= nested >= last;
                last = nested;
                // The first row of a type: the linear search's answer, and the binary
                // search's on sorted rows.
                if let Some(x) = by_type.get_mut(nested as usize)
                    && x.is_none()
                {
                    *x = Some(outer);
                }
            }
            (sorted || !t.header.is_sorted(Table::NestedClass)).then_some(by_type)
        });
        match by_type.as_ref().and_then(|b| b.get(rid as usize)) {
            Some(&outer) => outer,
            None => t.enclosing_type(rid).ok().flatten(),
        }
    }

    fn is_corlib(&self, img: &Image<'_>) -> bool {
        *self.corlib.get_or_init(|| {
            let object = match self.top.get() {
                Some(_) => self.top(img, "System", "Object"),
                None => first_top(img, "System", "Object"),
            };
            object
                .and_then(|rid| img.tables().type_def(rid).ok())
                .is_some_and(|row| row.extends.is_null())
        })
    }
}

/// Keeps `value` for `ns.name` unless the name has one (the first of a name is kept); a
/// namespace's key is allocated once, not per name.
fn insert_by_name<V>(map: &mut ByName<V>, ns: &str, name: &str, value: V) {
    let names = match map.get_mut(ns) {
        Some(names) => names,
        None => map.entry(Box::from(ns)).or_default(),
    };
    if !names.contains_key(name) {
        names.insert(Box::from(name), value);
    }
}

/// The bytes of string `index` as [`crate::image::heaps::StringHeap::get`] reads them,
/// without checking that they are UTF-8.
fn string_bytes<'s>(s: &crate::image::heaps::StringHeap<'s>, index: u32) -> Option<&'s [u8]> {
    if index == 0 && s.data.is_empty() {
        return Some(b"");
    }
    s.get_bytes(index).ok()
}

/// The hash of a type's namespace and name (a NUL between them, which neither holds).
fn name_hash(ns: &[u8], name: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut h = super::fx::FxHasher::default();
    h.write(ns);
    h.write_u8(0);
    h.write(name);
    h.finish()
}

/// The run of `sorted` whose elements `cmp` finds equal to the key it compares with.
fn run_of<T>(sorted: &[T], cmp: impl Fn(&T) -> std::cmp::Ordering) -> &[T] {
    let lo = sorted.partition_point(|e| cmp(e).is_lt());
    let len = sorted[lo..].partition_point(|e| cmp(e).is_le());
    &sorted[lo..lo + len]
}

/// Items of rows 1..=`rows` of a table, each row's in one run: the answer for a row is two
/// loads, not a search (asked once per type read, of every module's types).
#[derive(Debug, Default)]
struct Runs<T> {
    /// Where the run of row `r` starts in `items`; it ends where row `r + 1`'s starts.
    starts: Vec<u32>,
    items: Vec<T>,
}

impl<T> Runs<T> {
    /// The runs of `(row, item)` pairs, in their order within a row. Rows past `rows` are
    /// dropped (never asked: they name no row), so a corrupt row number allocates nothing.
    fn new(rows: u32, mut pairs: Vec<(u32, T)>) -> Self {
        pairs.retain(|&(r, _)| r <= rows);
        // Stable, and linear on the usual sorted table.
        pairs.sort_by_key(|&(r, _)| r);
        let mut starts = vec![0u32; rows as usize + 2];
        for &(r, _) in &pairs {
            starts[r as usize + 1] += 1;
        }
        for r in 1..starts.len() {
            starts[r] += starts[r - 1];
        }
        Runs {
            starts,
            items: pairs.into_iter().map(|(_, item)| item).collect(),
        }
    }

    /// The items of row `r`, in order (none for a row past the table).
    fn of(&self, r: u32) -> &[T] {
        let r = r as usize;
        match (self.starts.get(r), self.starts.get(r + 1)) {
            (Some(&a), Some(&b)) => self.items.get(a as usize..b as usize).unwrap_or(&[]),
            _ => &[],
        }
    }
}

/// The first TypeDef named `ns.name` that is not nested, as [`ModuleIndex::top`] keeps it,
/// found without building the index (a module verified once asks only for `System.Object`).
fn first_top(img: &Image<'_>, ns: &str, name: &str) -> Option<u32> {
    let t = img.tables();
    let s = img.strings();
    // Bytes compared (equal to a `str`, they are UTF-8): no check of every type's names.
    let (ns, name) = (ns.as_bytes(), name.as_bytes());
    (1..=t.rows(Table::TypeDef)).find(|&rid| {
        t.type_def(rid).is_ok_and(|row| {
            string_bytes(&s, row.namespace) == Some(ns) && string_bytes(&s, row.name) == Some(name)
        }) && !(1..=t.rows(Table::NestedClass))
            .any(|r| t.nested_class(r).is_ok_and(|n| n.nested_class == rid))
    })
}

/// A referenced assembly, opened once and shared by every image that references it.
#[derive(Debug)]
pub struct Loaded {
    image: Image<'static>,
    path: PathBuf,
    name: String,
    index: ModuleIndex,
}

impl Loaded {
    /// Where it was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A search of [`ModuleStore::find`]: the directory searched first, the runtime whose
/// directories come first, and the name.
type Search = (Option<PathBuf>, Flavour, String);

/// The runtime an image is built against, which decides whose libraries its references name:
/// mono's 4.5 profile (`mscorlib`) or CoreCLR's shared framework (`System.Private.CoreLib`,
/// `System.Runtime`). Both define `System.RuntimeTypeHandle` and the like in different core
/// libraries, so an image whose references were found in the other runtime's directories
/// would see its own types as strangers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// .NET Framework and mono: references looked for in mono's directories first.
    Framework,
    /// .NET Core: references looked for in CoreCLR's shared framework first.
    Core,
}

impl Flavour {
    /// The flavour of `img`, from the core library it names: `System.Private.CoreLib` (or
    /// being it) or `System.Runtime` without `mscorlib` is .NET Core; anything else (`mscorlib`,
    /// `netstandard`, nothing) is the Framework, which both runtimes can resolve.
    pub fn of(img: &Image<'_>) -> Flavour {
        let t = img.tables();
        let names = (1..=t.rows(Table::AssemblyRef)).filter_map(|rid| {
            let row = t.assembly_ref(rid).ok()?;
            img.strings().get(row.name).ok()
        });
        let (mut core, mut runtime, mut mscorlib) = (false, false, false);
        for n in names.chain(assembly_name(img).as_deref()) {
            core |= n.eq_ignore_ascii_case("System.Private.CoreLib");
            runtime |= n.eq_ignore_ascii_case("System.Runtime");
            mscorlib |= n.eq_ignore_ascii_case("mscorlib");
        }
        if core || (runtime && !mscorlib) {
            Flavour::Core
        } else {
            Flavour::Framework
        }
    }
}

/// Where references are found, and the ones opened so far. Shared by threads and by every
/// image of a run, so each reference is opened once.
#[derive(Debug, Default)]
pub struct ModuleStore {
    dirs: Vec<PathBuf>,
    /// The runtimes' directories, searched after `dirs`: those of the image's flavour first.
    runtime: Vec<(Flavour, PathBuf)>,
    opened: Mutex<HashMap<PathBuf, Option<Arc<Loaded>>>>,
    /// [`ModuleStore::find`]'s answers by (directory searched first, name): every
    /// image of a run asks for the same few assemblies, and each search costs a `stat` per
    /// directory and extension tried.
    found: Mutex<HashMap<Search, Option<Arc<Loaded>>>>,
    /// Assemblies held in memory ([`ModuleStore::hold`]), found by name before any directory.
    held: Vec<Arc<Loaded>>,
}

impl ModuleStore {
    /// A store that looks in `dirs` (after the input's own directory).
    pub fn new(dirs: Vec<PathBuf>) -> Self {
        ModuleStore {
            dirs,
            runtime: Vec::new(),
            opened: Mutex::default(),
            found: Mutex::default(),
            held: Vec::new(),
        }
    }

    /// Adds an assembly held in memory (a probe a rewriter is about to reference, say),
    /// found by its assembly name, as any reference is, before the input's directory and the
    /// store's; `label` stands for its path in what is reported. False, and nothing added,
    /// when the image has no assembly or module name to be found by.
    pub fn hold(&mut self, image: Image<'static>, label: PathBuf) -> bool {
        let Some(name) = assembly_name(&image) else {
            return false;
        };
        self.held.push(Arc::new(Loaded {
            image,
            path: label,
            name,
            index: ModuleIndex::default(),
        }));
        true
    }

    /// `dirs`, then the runtime directories found on this machine ([`runtime_dirs`]): mono's
    /// 4.5 profile and its facades, and CoreCLR's shared framework, those of the runtime an
    /// image is built against first ([`Flavour`]).
    pub fn with_runtime_dirs(dirs: Vec<PathBuf>) -> Self {
        let mut store = Self::new(dirs);
        store.runtime = flavoured_runtime_dirs();
        store
    }

    /// The directories searched after the input's own: those given, then the runtimes'.
    pub fn dirs(&self) -> Vec<&Path> {
        let runtime = self.runtime.iter().map(|(_, d)| d.as_path());
        self.dirs
            .iter()
            .map(PathBuf::as_path)
            .chain(runtime)
            .collect()
    }

    /// The assembly of simple name `name`: one held in memory, else looked for beside `near`,
    /// in the store's directories, and in the runtimes' (`flavour`'s first).
    fn find(&self, name: &str, near: Option<&Path>, flavour: Flavour) -> Option<Arc<Loaded>> {
        // Assembly names compare without regard to ASCII case, as the runtimes' binders
        // compare them.
        if let Some(l) = self.held.iter().find(|l| l.name.eq_ignore_ascii_case(name)) {
            return Some(l.clone());
        }
        // Kept by the name as asked: the search looks for files of that spelling.
        let key = (near.map(Path::to_path_buf), flavour, name.to_string());
        let found = || self.found.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = found().get(&key) {
            return l.clone();
        }
        let l = self.search(name, near, flavour);
        found().insert(key, l.clone());
        l
    }

    /// [`ModuleStore::find`]'s search of the directories.
    fn search(&self, name: &str, near: Option<&Path>, flavour: Flavour) -> Option<Arc<Loaded>> {
        let runtime = |first: bool| {
            self.runtime
                .iter()
                .filter(move |(f, _)| (*f == flavour) == first)
                .map(|(_, d)| d.as_path())
        };
        let dirs = near
            .into_iter()
            .chain(self.dirs.iter().map(PathBuf::as_path))
            .chain(runtime(true))
            .chain(runtime(false));
        for dir in dirs {
            for ext in ["dll", "exe"] {
                let path = dir.join(format!("{name}.{ext}"));
                if !path.is_file() {
                    continue;
                }
                if let Some(l) = self.open(&path) {
                    return Some(l);
                }
            }
        }
        None
    }

    fn open(&self, path: &Path) -> Option<Arc<Loaded>> {
        let mut opened = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = opened.get(path) {
            return l.clone();
        }
        let loaded = Image::open(path).ok().and_then(|image| {
            let name = assembly_name(&image)?;
            Some(Arc::new(Loaded {
                image,
                path: path.to_path_buf(),
                name,
                index: ModuleIndex::default(),
            }))
        });
        opened.insert(path.to_path_buf(), loaded.clone());
        loaded
    }

    /// Number of reference files opened so far (assemblies held in memory not counted).
    pub fn opened(&self) -> usize {
        self.opened
            .lock()
            .map(|o| o.values().filter(|l| l.is_some()).count())
            .unwrap_or(0)
    }
}

/// The runtime directories that exist on this machine: mono's, then CoreCLR's.
pub fn runtime_dirs() -> Vec<PathBuf> {
    flavoured_runtime_dirs()
        .into_iter()
        .map(|(_, d)| d)
        .collect()
}

/// [`runtime_dirs`] with the runtime each belongs to.
fn flavoured_runtime_dirs() -> Vec<(Flavour, PathBuf)> {
    let mut out = Vec::new();
    for d in ["/usr/lib/mono/4.5", "/usr/lib/mono/4.5/Facades"] {
        let p = PathBuf::from(d);
        if p.is_dir() {
            out.push((Flavour::Framework, p));
        }
    }
    if let Some(p) = crate::harness::runtime::coreclr_framework_dir() {
        out.push((Flavour::Core, p));
    }
    out
}

/// The simple name of an image's assembly (its module name without extension when it has no
/// Assembly row).
fn assembly_name(img: &Image<'_>) -> Option<String> {
    let t = img.tables();
    if t.rows(Table::Assembly) > 0 {
        let row = t.assembly(1).ok()?;
        return img.strings().get(row.name).ok().map(str::to_string);
    }
    let m = t.module(1).ok()?;
    let n = img.strings().get(m.name).ok()?;
    Some(n.rsplit_once('.').map_or(n, |(a, _)| a).to_string())
}

/// The owner of each row of `table` by the TypeDef lists of column `col` (0: none), as
/// [`crate::image::tables::Tables::declaring_type`] finds it; `None` when the lists go through
/// the `ptr` table, do not run in order, or cannot be read (the caller asks the tables then).
fn list_owners(
    t: &crate::image::tables::Tables<'_>,
    table: Table,
    ptr: Table,
    col: usize,
) -> Option<Vec<u32>> {
    if t.rows(ptr) > 0 {
        return None;
    }
    let rows = t.rows(table) as usize;
    let types = t.rows(Table::TypeDef);
    let mut starts = Vec::with_capacity(types as usize);
    for rid in 1..=types {
        let s = t.cell(Table::TypeDef, rid, col).ok()?;
        if starts.last().is_some_and(|&p| s < p) {
            return None;
        }
        starts.push(s);
    }
    let mut owners = vec![0u32; rows + 1];
    for (k, &s) in starts.iter().enumerate() {
        let end = starts
            .get(k + 1)
            .map_or(rows + 1, |&e| (e as usize).min(rows + 1));
        for o in owners.iter_mut().take(end).skip((s as usize).max(1)) {
            *o = k as u32 + 1;
        }
    }
    Some(owners)
}

/// The outermost TypeDef enclosing TypeDef `rid` (itself when not nested) and whether any
/// encloses it, followed as [`TypeSystem::def_name`] follows it; `None` when an enclosing row or
/// its name cannot be read.
fn enclosing_chain(img: &Image<'_>, idx: &ModuleIndex, rid: u32) -> Option<(u32, bool)> {
    let t = img.tables();
    let s = img.strings();
    let (mut outer, mut nested) = (rid, false);
    for _ in 0..MAX_DEPTH {
        match idx.enclosing(img, outer) {
            Some(o) => {
                let orow = t.type_def(o).ok()?;
                s.get(orow.name).ok()?;
                outer = o;
                nested = true;
            }
            None => break,
        }
    }
    Some((outer, nested))
}

/// An empty map with room for `n` entries.
fn reserved<K: Eq + std::hash::Hash, V>(n: usize) -> FxMap<K, V> {
    let mut m = FxMap::default();
    m.reserve(n);
    m
}

/// A value per row of a metadata table, kept when first worked out.
#[derive(Debug)]
struct PerRow<T>(Vec<Option<T>>);

impl<T> Default for PerRow<T> {
    fn default() -> Self {
        PerRow(Vec::new())
    }
}

impl<T: Clone> PerRow<T> {
    /// The value kept for row `rid`.
    #[inline]
    fn get(&self, rid: u32) -> Option<&T> {
        self.0.get(rid as usize)?.as_ref()
    }

    /// Keeps `value` for row `rid` of a table of `rows` rows; a row past the table is not kept
    /// (the table's size bounds what is allocated).
    fn put(&mut self, rid: u32, rows: u32, value: T) {
        if rid > rows {
            return;
        }
        if self.0.len() <= rid as usize {
            self.0.resize(rows as usize + 1, None);
        }
        self.0[rid as usize] = Some(value);
    }
}

/// What kind of type a TypeDef is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A class (reference type).
    Class,
    /// An interface.
    Interface,
    /// A value type other than an enum.
    Value,
    /// An enum, with its underlying type when it could be read.
    Enum(Option<Prim>),
    /// Not known: the base type could not be resolved.
    Unknown,
}

/// What the type system knows of one TypeDef (its name: [`TypeSystem::def_name`]).
#[derive(Clone, Debug)]
pub struct TypeInfo {
    /// Class, interface, value type or enum.
    pub kind: Kind,
    /// The base type in the definition's own generic context; `None` for interfaces and
    /// `System.Object`.
    pub base: Option<TyId>,
    /// The interfaces it declares.
    pub interfaces: Vec<TyId>,
    /// Flags of its generic parameters (variance in the low two bits).
    pub generic_params: Vec<u16>,
}

/// Whether a value of one type may be used where another is expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ans {
    /// Provably assignable.
    Yes,
    /// Provably not.
    No,
    /// Cannot tell (an unresolved type, a generic parameter, variance): no finding.
    Unknown,
}

/// A module of a [`TypeSystem`], held apart from it.
enum ModRef<'a> {
    Current(&'a Image<'a>),
    Loaded(Arc<Loaded>),
}

impl ModRef<'_> {
    fn img(&self) -> &Image<'_> {
        match self {
            ModRef::Current(i) => i,
            ModRef::Loaded(l) => &l.image,
        }
    }
}

/// The type system of one image being verified, over the references of a [`ModuleStore`].
pub struct TypeSystem<'a> {
    store: &'a ModuleStore,
    near: Option<PathBuf>,
    /// Whose runtime directories the image's references are looked for in first.
    flavour: Flavour,
    current: &'a Image<'a>,
    current_name: String,
    current_index: ModuleIndex,
    refs: Vec<Arc<Loaded>>,
    by_name: FxMap<String, Option<u32>>,
    /// [`TypeSystem::assembly_ref`]'s answers by (module, AssemblyRef row).
    assembly_refs: FxMap<(u32, u32), Option<u32>>,
    /// An assembly name lowered for [`TypeSystem::assembly`]'s lookup.
    lower: String,
    /// A type's arguments while [`TypeSystem::supertypes`] substitutes them.
    super_args: Vec<TyId>,
    /// The types met and to visit by [`TypeSystem::assignable`]'s walk, kept between walks.
    walk_seen: FxSet<TyId>,
    walk_queue: Vec<TyId>,
    /// The interned types.
    pub tys: Interner,
    /// TypeRefs of referenced modules resolved, by (module, row); the image's own are in
    /// `own_typerefs`.
    typerefs: FxMap<(u32, u32), TyId>,
    /// TypeRefs of the image being verified resolved, by row (no hashing: signatures name
    /// them most).
    own_typerefs: PerRow<TyId>,
    typespecs: FxMap<(u32, u32), TyId>,
    /// What [`TypeSystem::info`] read of the TypeDefs of referenced modules (`None`: being
    /// read, or unreadable); the image's own are in `own_infos`.
    infos: FxMap<TypeKey, Option<Rc<TypeInfo>>>,
    /// The same for the TypeDefs of the image being verified, by row.
    own_infos: PerRow<Option<Rc<TypeInfo>>>,
    /// TypeDefs as the interner spells them.
    key_types: FxMap<TypeKey, TyId>,
    /// The same for the TypeDefs of the image being verified, by row.
    own_key_types: PerRow<TyId>,
    /// Answers of [`TypeSystem::assignable`].
    assignable_cache: FxMap<(TyId, TyId), Ans>,
    /// Whether each type is a value type, by type id (see [`TypeSystem::is_value_type`]).
    value_types: Vec<Option<Option<bool>>>,
    /// Method tokens of the image being verified, resolved: by table (MethodDef, MemberRef,
    /// MethodSpec) and row, `None` until first asked.
    methods: [Vec<Option<Option<MethodSig>>>; 3],
    /// The parameter types of every [`MethodSig`], one run each.
    params: Vec<TyId>,
    /// Parameter types being read ([`TypeSystem::read_method_kept`]), a stack.
    scratch: Vec<TyId>,
    /// A declaring type's arguments, while a MemberRef's signature is instantiated.
    class_args: Vec<TyId>,
    /// The StandAloneMethodSigs of `calli` tokens, resolved.
    standalone: FxMap<u32, Option<MethodSig>>,
    /// Field tokens of the image being verified, resolved: Field and MemberRef rows.
    fields: [PerRow<Option<(TyId, TyId, bool)>>; 2],
    /// Local types by StandAloneSig row of the image being verified.
    locals_by_row: PerRow<Option<(u32, u32)>>,
    /// Method signatures by (module, `#Blob` index), as read (before substitution): methods
    /// that share a signature share its blob.
    method_sigs: FxMap<(u32, u32), Option<MethodSig>>,
    /// Field types of the image being verified by `#Blob` index, as read.
    field_sigs: FxMap<u32, Option<TyId>>,
    /// Local types of the image being verified by `#Blob` index of their LocalVarSig.
    local_sigs: FxMap<u32, Option<(u32, u32)>>,
    /// The local types of every LocalVarSig read, one run `(start, len)` each (no allocation
    /// per signature).
    local_types: Vec<TyId>,
    /// The declaring TypeDef of each MethodDef of the image being verified (0: none), when the
    /// method lists run in order without a MethodPtr table; `None` until first asked.
    method_owners: Option<Option<Vec<u32>>>,
    /// [`TypeSystem::overridable`] by method token of the image being verified.
    overridable: FxMap<u32, Option<bool>>,
    /// The same for Field rows.
    field_owners: Option<Option<Vec<u32>>>,
    /// How each type is held on the stack, by type id (see [`super::vtype::stack_of`]).
    pub(super) forms: Vec<Option<V>>,
    /// TypeDefs of the well-known types the interner spells without a key.
    wk_keys: FxMap<TyId, TypeKey>,
    /// Well-known types by name, looked up once.
    wk: FxMap<&'static str, TyId>,
}

impl std::fmt::Debug for TypeSystem<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TypeSystem")
            .field("current", &self.current_name)
            .field("refs", &self.refs.len())
            .field("types", &self.tys.len())
            .finish_non_exhaustive()
    }
}

impl<'a> TypeSystem<'a> {
    /// The type system of `image` (read from `path`, whose directory is searched first).
    pub fn new(store: &'a ModuleStore, image: &'a Image<'a>, path: Option<&Path>) -> Self {
        let current_name = assembly_name(image).unwrap_or_default();
        // Tables sized by the image's rows, so that they seldom grow (each growth rehashes
        // what they hold): the types a signature names come through its TypeDef, TypeRef and
        // TypeSpec rows, and their pointers, arrays and instances; the referenced types read,
        // through its TypeRefs; the signature blobs read, through its MethodDef and MemberRef
        // rows (fewer: methods share blobs); local signatures, one per StandAloneSig row at
        // most; field signatures, through its Field rows (few: fields share blobs).
        let t = image.tables();
        let rows = |table| t.rows(table) as usize;
        let types = rows(Table::TypeDef) + rows(Table::TypeRef) + rows(Table::TypeSpec);
        let method_sigs = reserved((rows(Table::MethodDef) + rows(Table::MemberRef)) / 2);
        let local_sigs = reserved(rows(Table::StandAloneSig));
        let mut by_name = FxMap::default();
        by_name.insert(current_name.to_ascii_lowercase(), Some(0));
        TypeSystem {
            store,
            near: path.and_then(Path::parent).map(Path::to_path_buf),
            flavour: Flavour::of(image),
            current: image,
            current_name,
            current_index: ModuleIndex::default(),
            refs: Vec::new(),
            by_name,
            assembly_refs: FxMap::default(),
            lower: String::new(),
            super_args: Vec::new(),
            walk_seen: FxSet::default(),
            walk_queue: Vec::new(),
            tys: Interner::with_capacity(types),
            typerefs: FxMap::default(),
            own_typerefs: PerRow::default(),
            typespecs: FxMap::default(),
            infos: reserved(rows(Table::TypeRef)),
            own_infos: PerRow::default(),
            key_types: reserved(rows(Table::TypeRef)),
            own_key_types: PerRow::default(),
            assignable_cache: FxMap::default(),
            value_types: Vec::new(),
            methods: Default::default(),
            params: Vec::new(),
            scratch: Vec::new(),
            class_args: Vec::new(),
            standalone: FxMap::default(),
            fields: Default::default(),
            locals_by_row: PerRow::default(),
            method_sigs,
            field_sigs: reserved(rows(Table::Field) / 4),
            local_sigs,
            local_types: Vec::new(),
            method_owners: None,
            overridable: FxMap::default(),
            field_owners: None,
            forms: Vec::new(),
            wk_keys: FxMap::default(),
            wk: FxMap::default(),
        }
    }

    /// The image being verified.
    pub fn image(&self) -> &'a Image<'a> {
        self.current
    }

    /// A handle on module `m` that does not borrow the type system, so what is read from it
    /// can be used while the type system changes.
    fn handle(&self, m: u32) -> Option<ModRef<'a>> {
        if m == 0 {
            return Some(ModRef::Current(self.current));
        }
        self.refs.get(m as usize - 1).cloned().map(ModRef::Loaded)
    }

    fn module(&self, m: u32) -> Option<(&Image<'_>, &ModuleIndex)> {
        if m == 0 {
            return Some((self.current, &self.current_index));
        }
        self.refs.get(m as usize - 1).map(|l| (&l.image, &l.index))
    }

    /// The module number of the assembly of simple name `name`, opening it when first asked.
    fn assembly(&mut self, name: &str) -> Option<u32> {
        // Lowered into a buffer kept between calls: most names asked are known already.
        let mut lower = std::mem::take(&mut self.lower);
        lower.clear();
        lower.extend(name.chars().map(|c| c.to_ascii_lowercase()));
        let known = self.by_name.get(lower.as_str()).copied();
        self.lower = lower;
        if let Some(m) = known {
            return m;
        }
        let key = self.lower.clone();
        let found = self.store.find(name, self.near.as_deref(), self.flavour);
        let m = found.map(|l| {
            // One module per assembly, even when found under two names.
            if let Some(i) = self.refs.iter().position(|r| Arc::ptr_eq(r, &l)) {
                return i as u32 + 1;
            }
            let by_assembly = l.name.to_ascii_lowercase();
            self.refs.push(l);
            let m = self.refs.len() as u32;
            self.by_name.entry(by_assembly).or_insert(Some(m));
            m
        });
        self.by_name.insert(key, m);
        m
    }

    /// The module of AssemblyRef `rid` of module `m` (whose image is `img`), by
    /// [`TypeSystem::assembly`], kept per row: most TypeRefs of a module name one of a few
    /// assemblies.
    fn assembly_ref(&mut self, m: u32, img: &Image<'_>, rid: u32) -> Option<u32> {
        if let Some(&known) = self.assembly_refs.get(&(m, rid)) {
            return known;
        }
        let found = img
            .tables()
            .assembly_ref(rid)
            .ok()
            .and_then(|row| img.strings().get(row.name).ok())
            .and_then(|name| self.assembly(name));
        // Rows past the table are not kept (they resolve to nothing again).
        if rid <= img.tables().rows(Table::AssemblyRef) {
            self.assembly_refs.insert((m, rid), found);
        }
        found
    }

    // -----------------------------------------------------------------------------------------
    // Resolution

    /// The type a TypeDef, TypeRef or TypeSpec token of module `m` names.
    pub fn type_token(&mut self, m: u32, token: Token) -> TyId {
        self.type_token_at(m, token, 0, None)
    }

    fn type_token_at(&mut self, m: u32, token: Token, depth: u32, value: Option<bool>) -> TyId {
        if depth > MAX_DEPTH {
            return TyId::UNKNOWN;
        }
        match token.table() {
            Some(Table::TypeDef) => self.key_type(
                TypeKey {
                    module: m,
                    rid: token.rid(),
                },
                value,
            ),
            Some(Table::TypeRef) => {
                let cached = if m == 0 {
                    self.own_typerefs.get(token.rid()).copied()
                } else {
                    self.typerefs.get(&(m, token.rid())).copied()
                };
                if let Some(t) = cached {
                    return self.with_kind(t, value);
                }
                let t = match self.resolve_typeref(m, token.rid(), depth) {
                    Some(key) => self.key_type(key, value),
                    None => TyId::UNKNOWN,
                };
                if m == 0 {
                    // A row past the table is not kept (it resolves to nothing again).
                    let rows = self.current.tables().rows(Table::TypeRef);
                    self.own_typerefs.put(token.rid(), rows, t);
                } else {
                    self.typerefs.insert((m, token.rid()), t);
                }
                t
            }
            Some(Table::TypeSpec) => {
                if let Some(&t) = self.typespecs.get(&(m, token.rid())) {
                    return t;
                }
                let md = self.handle(m);
                let blob = md.as_ref().and_then(|md| {
                    let img = md.img();
                    let row = img.tables().type_spec(token.rid()).ok()?;
                    img.blobs().get(row.signature).ok()
                });
                let t = match blob {
                    Some(b) => {
                        let mut r = SigReader::new(b);
                        self.read_type(m, &mut r, depth + 1)
                            .unwrap_or(TyId::UNKNOWN)
                    }
                    None => TyId::UNKNOWN,
                };
                self.typespecs.insert((m, token.rid()), t);
                t
            }
            _ => TyId::UNKNOWN,
        }
    }

    /// A cached TypeRef answer, re-marked value or class as a signature says.
    fn with_kind(&mut self, t: TyId, value: Option<bool>) -> TyId {
        match (self.tys.node(t), value) {
            (&TyNode::Class(k), Some(true)) => self.tys.intern(TyNode::Value(k)),
            (&TyNode::Value(k), Some(false)) => self.tys.intern(TyNode::Class(k)),
            _ => t,
        }
    }

    /// The TypeDef a TypeRef of module `m` resolves to.
    fn resolve_typeref(&mut self, m: u32, rid: u32, depth: u32) -> Option<TypeKey> {
        if depth > MAX_DEPTH {
            return None;
        }
        // The names are read from a handle on the module, not from `self`, which the lookups
        // below change.
        let md = self.handle(m)?;
        let img = md.img();
        let row = img.tables().type_ref(rid).ok()?;
        let s = img.strings();
        let (scope, ns, name) = (
            row.resolution_scope,
            s.get(row.namespace).ok()?,
            s.get(row.name).ok()?,
        );
        match scope.table() {
            Some(Table::AssemblyRef) => {
                let target = self.assembly_ref(m, img, scope.rid())?;
                self.find_top(target, ns, name, depth + 1)
            }
            Some(Table::TypeRef) => {
                let outer = self.resolve_typeref(m, scope.rid(), depth + 1)?;
                let (img, idx) = self.module(outer.module)?;
                let rid = *idx.nested(img).get(&outer.rid)?.get(name)?;
                Some(TypeKey {
                    module: outer.module,
                    rid,
                })
            }
            Some(Table::Module) => self.find_top(m, ns, name, depth + 1),
            _ if scope.is_null() => self.find_top(m, ns, name, depth + 1),
            // ModuleRef: a type in another module of a multi-module assembly.
            _ => None,
        }
    }

    /// The top-level type `ns.name` of module `m`, following its type forwarders.
    fn find_top(&mut self, m: u32, ns: &str, name: &str, depth: u32) -> Option<TypeKey> {
        if depth > MAX_DEPTH {
            return None;
        }
        let md = self.handle(m)?;
        let img = md.img();
        let forward = {
            let (_, idx) = self.module(m)?;
            if let Some(rid) = idx.top(img, ns, name) {
                return Some(TypeKey { module: m, rid });
            }
            let imp = *by_name(idx.exported(img), ns, name)?;
            if imp.table() != Some(Table::AssemblyRef) {
                return None;
            }
            let row = img.tables().assembly_ref(imp.rid()).ok()?;
            img.strings().get(row.name).ok()?
        };
        let target = self.assembly(forward)?;
        if target == m {
            return None;
        }
        self.find_top(target, ns, name, depth + 1)
    }

    /// The interned type of a TypeDef, spelled as the well-known type when it is one.
    fn key_type(&mut self, key: TypeKey, value: Option<bool>) -> TyId {
        let cached = if key.module == 0 {
            self.own_key_types.get(key.rid).copied()
        } else {
            self.key_types.get(&key).copied()
        };
        if let Some(t) = cached {
            return t;
        }
        let t = self.key_type_uncached(key, value);
        // Only answers that do not depend on the signature's marker are kept: the definition
        // was read (not still being read, as inside its own base chain) and its kind is known
        // (one whose base is unresolved is a value type or a class as each signature says,
        // whichever asks first).
        let known = |i: &Option<Rc<TypeInfo>>| i.as_ref().is_some_and(|i| i.kind != Kind::Unknown);
        if self.info_kept(key).is_some_and(known) || self.wk_keys.get(&t) == Some(&key) {
            if key.module == 0 {
                let rows = self.current.tables().rows(Table::TypeDef);
                self.own_key_types.put(key.rid, rows, t);
            } else {
                self.key_types.insert(key, t);
            }
        }
        t
    }

    fn key_type_uncached(&mut self, key: TypeKey, value: Option<bool>) -> TyId {
        if let Some(wk) = self.well_known_of(key) {
            return wk;
        }
        let info = self.info(key);
        let is_value = match info.as_deref().map(|i| i.kind) {
            Some(Kind::Value | Kind::Enum(_)) => true,
            Some(Kind::Class | Kind::Interface) => false,
            Some(Kind::Unknown) | None => value.unwrap_or(false),
        };
        let generic = info
            .as_deref()
            .is_some_and(|i| !i.generic_params.is_empty());
        if generic {
            // The open generic type named without arguments (`ldtoken`, a TypeDef operand
            // inside its own definition): its own parameters as arguments.
            let n = info.as_deref().map_or(0, |i| i.generic_params.len());
            let args: Box<[TyId]> = (0..n as u32)
                .map(|i| self.tys.intern(TyNode::Var(i)))
                .collect();
            return self.tys.intern(TyNode::Inst {
                def: key,
                value: is_value,
                args,
            });
        }
        self.tys.intern(if is_value {
            TyNode::Value(key)
        } else {
            TyNode::Class(key)
        })
    }

    /// `System.Object`, `System.String`, `System.Void`, `System.TypedReference` and the
    /// primitive value types of the core library, as the interner spells them.
    fn well_known_of(&mut self, key: TypeKey) -> Option<TyId> {
        let (img, idx) = self.module(key.module)?;
        if !idx.is_corlib(img) {
            return None;
        }
        let row = img.tables().type_def(key.rid).ok()?;
        let s = img.strings();
        if s.get(row.namespace).ok()? != "System" {
            return None;
        }
        let name = s.get(row.name).ok()?;
        let t = match name {
            "Object" => TyId::OBJECT,
            "String" => TyId::STRING,
            "Void" => TyId::VOID,
            "TypedReference" => TyId::TYPEDREF,
            _ => {
                let p = Prim::of_system_name(name)?;
                self.tys.prim(p)
            }
        };
        self.wk_keys.entry(t).or_insert(key);
        Some(t)
    }

    /// Reads one type of a signature of module `m` (custom modifiers and `pinned` skipped).
    pub fn read_type(&mut self, m: u32, r: &mut SigReader<'_>, depth: u32) -> Option<TyId> {
        use element::*;
        if depth > MAX_DEPTH {
            return None;
        }
        let et = r.u8().ok()?;
        if let Some(p) = Prim::of_element(et) {
            return Some(self.tys.prim(p));
        }
        Some(match et {
            VOID => TyId::VOID,
            STRING => TyId::STRING,
            OBJECT => TyId::OBJECT,
            TYPEDBYREF => TyId::TYPEDREF,
            CLASS | VALUETYPE => {
                let tok = r.type_def_or_ref().ok()?;
                self.type_token_at(m, tok, depth + 1, Some(et == VALUETYPE))
            }
            VAR => self.tys.intern(TyNode::Var(r.compressed_u32().ok()?)),
            MVAR => self.tys.intern(TyNode::MVar(r.compressed_u32().ok()?)),
            PTR => {
                let t = self.read_type(m, r, depth + 1)?;
                self.tys.intern(TyNode::Ptr(t))
            }
            BYREF => {
                let t = self.read_type(m, r, depth + 1)?;
                self.tys.intern(TyNode::ByRef(t))
            }
            SZARRAY => {
                let t = self.read_type(m, r, depth + 1)?;
                self.tys.intern(TyNode::SzArray(t))
            }
            ARRAY => {
                let t = self.read_type(m, r, depth + 1)?;
                let rank = r.compressed_u32().ok()?;
                let sizes = r.compressed_u32().ok()?;
                for _ in 0..sizes.min(r.remaining() as u32) {
                    r.compressed_u32().ok()?;
                }
                let bounds = r.compressed_u32().ok()?;
                for _ in 0..bounds.min(r.remaining() as u32) {
                    r.compressed_i32().ok()?;
                }
                self.tys.intern(TyNode::Array(t, rank))
            }
            GENERICINST => {
                let kind = r.u8().ok()?;
                let tok = r.type_def_or_ref().ok()?;
                let n = r.compressed_u32().ok()?;
                if n as usize > r.remaining() {
                    return None;
                }
                // The arguments onto `scratch` (no `Vec` per instance), taken off on every
                // way out: a caller may go on after a failed read.
                let base = self.scratch.len();
                let t = self.read_inst(m, r, depth, tok, kind == VALUETYPE, n);
                self.scratch.truncate(base);
                return t;
            }
            FNPTR => {
                self.read_method(m, r, depth + 1)?;
                self.tys.intern(TyNode::FnPtr)
            }
            CMOD_REQD | CMOD_OPT => {
                r.type_def_or_ref().ok()?;
                return self.read_type(m, r, depth + 1);
            }
            PINNED => return self.read_type(m, r, depth + 1),
            _ => return None,
        })
    }

    /// The rest of a GENERICINST of [`TypeSystem::read_type`] after its definition `tok` (a
    /// value type for `value`): its `n` arguments, pushed onto `scratch` (the caller takes
    /// them off), then the instance.
    fn read_inst(
        &mut self,
        m: u32,
        r: &mut SigReader<'_>,
        depth: u32,
        tok: Token,
        value: bool,
        n: u32,
    ) -> Option<TyId> {
        let base = self.scratch.len();
        for _ in 0..n {
            let t = self.read_type(m, r, depth + 1)?;
            self.scratch.push(t);
        }
        let def = self.type_token_at(m, tok, depth + 1, Some(value));
        // The key alone (no clone of an instance's arguments).
        let (TyNode::Class(def) | TyNode::Value(def) | TyNode::Inst { def, .. }) =
            *self.tys.node(def)
        else {
            return Some(TyId::UNKNOWN);
        };
        let value = match self.info(def).as_deref().map(|i| i.kind) {
            Some(Kind::Unknown) | None => value,
            Some(k) => matches!(k, Kind::Value | Kind::Enum(_)),
        };
        let args = self.scratch.get(base..).unwrap_or(&[]);
        Some(self.tys.intern_inst(def, value, args))
    }

    /// Reads a method signature (MethodDefSig, MethodRefSig or StandAloneMethodSig).
    pub fn read_method(&mut self, m: u32, r: &mut SigReader<'_>, depth: u32) -> Option<MethodTy> {
        let base = self.scratch.len();
        let head = self.read_method_onto(m, r, depth + 1);
        let params = self.scratch[base..].to_vec();
        self.scratch.truncate(base);
        let (cc, generic_params, ret) = head?;
        Some(MethodTy {
            has_this: cc & 0x20 != 0,
            explicit_this: cc & 0x40 != 0,
            vararg: cc & 0x0F == 0x05,
            generic_params,
            ret,
            params,
        })
    }

    /// The signature of a method token of the image being verified (MethodDef, MemberRef or
    /// MethodSpec), its type arguments substituted, with the type declaring it; its parameters
    /// are [`TypeSystem::params`].
    #[inline]
    pub fn method(&mut self, token: Token) -> Option<MethodSig> {
        // Inlined into the rules: the table byte matched as it is, the usual answer a read
        // of the table kept; the first resolution out of line.
        let slot = match token.0 >> 24 {
            0x06 => 0,
            0x0A => 1,
            0x2B => 2,
            _ => return None,
        };
        match self.methods[slot].get(token.rid() as usize) {
            Some(Some(m)) => *m,
            _ => self.method_first(token, slot),
        }
    }

    /// [`TypeSystem::method`] the first time `token` is asked (table `slot` of `methods`).
    #[inline(never)]
    fn method_first(&mut self, token: Token, slot: usize) -> Option<MethodSig> {
        let rid = token.rid() as usize;
        let mut m = self.method_in(0, token, &[]);
        if let Some(sig) = m.as_mut() {
            sig.named_ctor = sig.has_this && names_dot_ctor(self.current, token);
        }
        let rows = self.current.tables().rows(token.table()?) as usize;
        // Rows past the table are not kept: the table's size bounds what is allocated.
        if rid <= rows {
            let table = &mut self.methods[slot];
            if table.len() <= rid {
                table.resize(rows + 1, None);
            }
            table[rid] = Some(m);
        }
        m
    }

    /// The parameter types of a signature the type system returned.
    pub fn params(&self, sig: &MethodSig) -> &[TyId] {
        let (start, len) = (sig.params.0 as usize, sig.params.1 as usize);
        self.params.get(start..start + len).unwrap_or(&[])
    }

    fn method_in(&mut self, m: u32, token: Token, method_args: &[TyId]) -> Option<MethodSig> {
        match token.table()? {
            Table::MethodDef => {
                let md = self.handle(m)?;
                let (index, parent) = {
                    let img = md.img();
                    let t = img.tables();
                    // The Signature column alone (a whole row costs a read per column).
                    let signature = t.cell(Table::MethodDef, token.rid(), 4).ok()?;
                    let parent = if m == 0 {
                        self.owner(token.rid(), false)
                    } else {
                        t.declaring_type(token.rid())
                    };
                    (signature, parent.ok()?)
                };
                let sig = self.method_sig(m, index)?;
                let parent = match parent {
                    Some(rid) => self.key_type(TypeKey { module: m, rid }, None),
                    None => TyId::UNKNOWN,
                };
                Some(self.subst_sig(sig, parent, &[], method_args))
            }
            Table::MemberRef => {
                let md = self.handle(m)?;
                let (index, class) = {
                    let row = md.img().tables().member_ref(token.rid()).ok()?;
                    (row.signature, row.class)
                };
                let sig = self.method_sig(m, index)?;
                let parent = match class.table() {
                    Some(Table::TypeDef | Table::TypeRef | Table::TypeSpec) => {
                        self.type_token(m, class)
                    }
                    Some(Table::MethodDef) => self.method_in(m, class, &[])?.parent,
                    _ => TyId::UNKNOWN,
                };
                // The arguments copied into a buffer kept between calls (no `Vec` per call).
                let mut class_args = std::mem::take(&mut self.class_args);
                class_args.clear();
                if let TyNode::Inst { args, .. } = self.tys.node(parent) {
                    class_args.extend_from_slice(args);
                }
                let out = self.subst_sig(sig, parent, &class_args, method_args);
                self.class_args = class_args;
                Some(out)
            }
            Table::MethodSpec => {
                let md = self.handle(m)?;
                let (method, blob) = {
                    let img = md.img();
                    let row = img.tables().method_spec(token.rid()).ok()?;
                    (row.method, img.blobs().get(row.instantiation).ok()?)
                };
                let mut r = SigReader::new(blob);
                if r.u8().ok()? != 0x0A {
                    return None;
                }
                let n = r.compressed_u32().ok()?;
                if n as usize > r.remaining() {
                    return None;
                }
                let mut args = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    args.push(self.read_type(m, &mut r, 1)?);
                }
                self.method_in(m, method, &args)
            }
            _ => None,
        }
    }

    /// The method signature in blob `index` of module `m`, read once. Called only outside
    /// [`TypeSystem::info`], where reading a signature twice gives the same answer, so keeping
    /// the first loses nothing; `None` also when the blob cannot be read.
    fn method_sig(&mut self, m: u32, index: u32) -> Option<MethodSig> {
        if let Some(sig) = self.method_sigs.get(&(m, index)) {
            return *sig;
        }
        // The blob found only when the signature is read: a kept answer (the same index read
        // before) needs no bounds checks of the heap.
        let md = self.handle(m)?;
        let blob = md.img().blobs().get(index).ok()?;
        let sig = self.read_method_kept(m, &mut SigReader::new(blob));
        self.method_sigs.insert((m, index), sig);
        sig
    }

    /// [`TypeSystem::read_method`] kept with its parameters in the pool (declared by
    /// [`TyId::UNKNOWN`]), its parameters read without a `Vec` of their own: onto `scratch`, a
    /// stack on which a nested read stays above this one's run and is gone when it returns.
    fn read_method_kept(&mut self, m: u32, r: &mut SigReader<'_>) -> Option<MethodSig> {
        let base = self.scratch.len();
        let read = self.read_method_onto(m, r, 1);
        let sig = read.map(|(cc, generic_params, ret)| {
            let start = self.params.len() as u32;
            self.params.extend_from_slice(&self.scratch[base..]);
            MethodSig {
                has_this: cc & 0x20 != 0,
                explicit_this: cc & 0x40 != 0,
                vararg: cc & 0x0F == 0x05,
                generic_params,
                ret,
                parent: TyId::UNKNOWN,
                params: (start, (self.scratch.len() - base) as u32),
                named_ctor: false,
            }
        });
        self.scratch.truncate(base);
        sig
    }

    /// The reading of [`TypeSystem::read_method_kept`]: the calling convention, the number of
    /// generic parameters and the return type; the parameters pushed onto `scratch`.
    fn read_method_onto(
        &mut self,
        m: u32,
        r: &mut SigReader<'_>,
        depth: u32,
    ) -> Option<(u8, u32, TyId)> {
        let cc = r.u8().ok()?;
        let generic_params = if cc & 0x10 != 0 {
            r.compressed_u32().ok()?
        } else {
            0
        };
        let count = r.compressed_u32().ok()?;
        if count as usize > r.remaining() {
            return None;
        }
        let ret = self.read_type(m, r, depth)?;
        for _ in 0..count {
            if r.peek().ok()? == element::SENTINEL {
                r.u8().ok()?;
            }
            let t = self.read_type(m, r, depth)?;
            self.scratch.push(t);
        }
        Some((cc, generic_params, ret))
    }

    /// The declaring TypeDef of MethodDef (`field`: Field) `rid` of the image being verified,
    /// as [`crate::image::tables::Tables::declaring_type`] answers, from a table built once.
    #[inline]
    fn owner(&mut self, rid: u32, field: bool) -> Result<Option<u32>, crate::image::ImageError> {
        // The table built: one index, inlined into the callers; the rest out of line.
        let built = if field {
            &self.field_owners
        } else {
            &self.method_owners
        };
        if let Some(Some(o)) = built {
            return Ok(o.get(rid as usize).copied().filter(|&r| r != 0));
        }
        self.owner_slow(rid, field)
    }

    /// [`TypeSystem::owner`] before its table is built, or without one.
    #[inline(never)]
    fn owner_slow(
        &mut self,
        rid: u32,
        field: bool,
    ) -> Result<Option<u32>, crate::image::ImageError> {
        let t = self.current.tables();
        let (slot, table, ptr, col) = if field {
            (&mut self.field_owners, Table::Field, Table::FieldPtr, 4)
        } else {
            (
                &mut self.method_owners,
                Table::MethodDef,
                Table::MethodPtr,
                5,
            )
        };
        let owners = slot.get_or_insert_with(|| list_owners(&t, table, ptr, col));
        match owners {
            Some(o) => Ok(o.get(rid as usize).copied().filter(|&r| r != 0)),
            None if field => t.field_declaring_type(rid),
            None => t.declaring_type(rid),
        }
    }

    /// `sig` declared by `parent`, with `!n` replaced by `class_args[n]` and `!!n` by
    /// `method_args[n]`; its parameter run is shared when nothing is replaced.
    fn subst_sig(
        &mut self,
        sig: MethodSig,
        parent: TyId,
        class_args: &[TyId],
        method_args: &[TyId],
    ) -> MethodSig {
        let mut out = MethodSig { parent, ..sig };
        if class_args.is_empty() && method_args.is_empty() {
            return out;
        }
        out.ret = self.tys.subst(sig.ret, class_args, method_args);
        let start = self.params.len() as u32;
        for k in sig.params.0..sig.params.0 + sig.params.1 {
            let p = self.params[k as usize];
            let p = self.tys.subst(p, class_args, method_args);
            self.params.push(p);
        }
        out.params = (start, sig.params.1);
        out
    }

    /// The type arguments of an instantiated type (empty for others).
    pub fn args_of(&self, t: TyId) -> Vec<TyId> {
        match self.tys.node(t) {
            TyNode::Inst { args, .. } => args.to_vec(),
            _ => Vec::new(),
        }
    }

    /// A field token of the image being verified: its type (the declaring type's arguments
    /// substituted), the declaring type, and whether it is static.
    #[inline]
    pub fn field(&mut self, token: Token) -> Option<(TyId, TyId, bool)> {
        // As in [`TypeSystem::method`]: the usual answer inlined, the first out of line.
        let slot = match token.0 >> 24 {
            0x04 => 0,
            0x0A => 1,
            _ => return None,
        };
        match self.fields[slot].get(token.rid()) {
            Some(f) => *f,
            None => self.field_first(token, slot),
        }
    }

    /// [`TypeSystem::field`] the first time `token` is asked (table `slot` of `fields`).
    #[inline(never)]
    fn field_first(&mut self, token: Token, slot: usize) -> Option<(TyId, TyId, bool)> {
        let f = self.field_uncached(token);
        let rows = self.current.tables().rows(token.table()?);
        self.fields[slot].put(token.rid(), rows, f);
        f
    }

    fn field_uncached(&mut self, token: Token) -> Option<(TyId, TyId, bool)> {
        match token.table()? {
            Table::Field => {
                let (index, blob, flags) = {
                    let img = self.current;
                    let row = img.tables().field(token.rid()).ok()?;
                    (
                        row.signature,
                        img.blobs().get(row.signature).ok()?,
                        row.flags,
                    )
                };
                let parent = self.owner(token.rid(), true).ok()?;
                let ty = self.own_field_sig(index, blob)?;
                let parent = match parent {
                    Some(rid) => self.key_type(TypeKey { module: 0, rid }, None),
                    None => TyId::UNKNOWN,
                };
                Some((ty, parent, flags & 0x10 != 0))
            }
            Table::MemberRef => {
                let (index, blob, class) = {
                    let img = self.current;
                    let row = img.tables().member_ref(token.rid()).ok()?;
                    (
                        row.signature,
                        img.blobs().get(row.signature).ok()?,
                        row.class,
                    )
                };
                let ty = self.own_field_sig(index, blob)?;
                let parent = match class.table() {
                    Some(Table::TypeDef | Table::TypeRef | Table::TypeSpec) => {
                        self.type_token(0, class)
                    }
                    _ => TyId::UNKNOWN,
                };
                let args = self.args_of(parent);
                let ty = self.tys.subst(ty, &args, &[]);
                // A MemberRef does not say whether the field is static: the instruction does.
                Some((ty, parent, false))
            }
            _ => None,
        }
    }

    /// [`TypeSystem::field_sig`] of the image being verified, blob `index`, read once (outside
    /// [`TypeSystem::info`] only, as [`TypeSystem::method_sig`]).
    fn own_field_sig(&mut self, index: u32, blob: &[u8]) -> Option<TyId> {
        if let Some(&t) = self.field_sigs.get(&index) {
            return t;
        }
        let t = self.field_sig(0, blob);
        self.field_sigs.insert(index, t);
        t
    }

    fn field_sig(&mut self, m: u32, blob: &[u8]) -> Option<TyId> {
        let mut r = SigReader::new(blob);
        if r.u8().ok()? & 0x0F != 0x06 {
            return None;
        }
        self.read_type(m, &mut r, 0)
    }

    /// The local types of a LocalVarSig token of the image being verified (read once per
    /// signature blob).
    pub fn locals(&mut self, token: Token) -> Option<Rc<[TyId]>> {
        let (start, len) = self.local_run(token)?;
        let run = self
            .local_types
            .get(start as usize..(start + len) as usize)?;
        Some(Rc::from(run))
    }

    /// [`TypeSystem::locals`] appended to `out`; false when they cannot be read.
    pub fn locals_into(&mut self, token: Token, out: &mut Vec<TyId>) -> bool {
        let Some((start, len)) = self.local_run(token) else {
            return false;
        };
        match self.local_types.get(start as usize..(start + len) as usize) {
            Some(run) => {
                out.extend_from_slice(run);
                true
            }
            None => false,
        }
    }

    /// Where [`TypeSystem::locals`] of `token` lie in `local_types`.
    fn local_run(&mut self, token: Token) -> Option<(u32, u32)> {
        if let Some(l) = self.locals_by_row.get(token.rid()) {
            return *l;
        }
        let l = self.locals_uncached(token);
        let rows = self.current.tables().rows(Table::StandAloneSig);
        self.locals_by_row.put(token.rid(), rows, l);
        l
    }

    fn locals_uncached(&mut self, token: Token) -> Option<(u32, u32)> {
        let (index, blob) = {
            let img = self.current;
            let row = img.tables().standalone_sig(token.rid()).ok()?;
            (row.signature, img.blobs().get(row.signature).ok()?)
        };
        if let Some(l) = self.local_sigs.get(&index) {
            return *l;
        }
        // Read onto `scratch` (a nested read stays above this one's run), then kept.
        let base = self.scratch.len();
        let read = self.read_locals(blob);
        let l = read.map(|()| {
            let start = self.local_types.len() as u32;
            self.local_types.extend_from_slice(&self.scratch[base..]);
            (start, (self.scratch.len() - base) as u32)
        });
        self.scratch.truncate(base);
        self.local_sigs.insert(index, l);
        l
    }

    /// The types of a LocalVarSig, pushed onto `scratch`.
    fn read_locals(&mut self, blob: &[u8]) -> Option<()> {
        let mut r = SigReader::new(blob);
        if r.u8().ok()? != 0x07 {
            return None;
        }
        let n = r.compressed_u32().ok()?;
        if n as usize > r.remaining() {
            return None;
        }
        for _ in 0..n {
            let t = self.read_type(0, &mut r, 0)?;
            self.scratch.push(t);
        }
        Some(())
    }

    /// The StandAloneMethodSig of a `calli` token of the image being verified (its declaring
    /// type [`TyId::UNKNOWN`]).
    pub fn standalone_method(&mut self, token: Token) -> Option<MethodSig> {
        if let Some(s) = self.standalone.get(&token.0) {
            return *s;
        }
        let blob = {
            let img = self.current;
            img.tables()
                .standalone_sig(token.rid())
                .ok()
                .and_then(|row| img.blobs().get(row.signature).ok())
        };
        let sig = blob.and_then(|b| self.read_method_kept(0, &mut SigReader::new(b)));
        self.standalone.insert(token.0, sig);
        sig
    }

    /// The type of TypeDef `rid` of the image being verified as its own methods see it: its
    /// generic parameters as arguments.
    pub fn own_type(&mut self, rid: u32) -> TyId {
        self.key_type(TypeKey { module: 0, rid }, None)
    }

    /// A well-known type of the core library by `Namespace.Name` (e.g. `System.Exception`).
    pub fn well_known(&mut self, full: &'static str) -> TyId {
        if let Some(&t) = self.wk.get(full) {
            return t;
        }
        let (ns, name) = full.rsplit_once('.').unwrap_or(("", full));
        let corlib = self.corlib();
        let t = match corlib.and_then(|m| self.find_top(m, ns, name, 0)) {
            Some(k) => self.key_type(k, None),
            None => TyId::UNKNOWN,
        };
        self.wk.insert(full, t);
        t
    }

    /// The module number of the core library: the image itself, or what `System.Object`
    /// resolves to from it.
    fn corlib(&mut self) -> Option<u32> {
        if self.current_index.is_corlib(self.current) {
            return Some(0);
        }
        for name in [
            "mscorlib",
            "System.Private.CoreLib",
            "System.Runtime",
            "netstandard",
        ] {
            if let Some(m) = self.assembly(name)
                && let Some(k) = self.find_top(m, "System", "Object", 0)
            {
                return Some(k.module);
            }
        }
        None
    }

    // -----------------------------------------------------------------------------------------
    // Type definitions

    /// What is known of a TypeDef; `None` when its row cannot be read.
    pub fn info(&mut self, key: TypeKey) -> Option<Rc<TypeInfo>> {
        if let Some(i) = self.info_kept(key) {
            return i.clone();
        }
        // Mark first: a base chain that loops back ends here.
        self.keep_info(key, None);
        let info = self.read_info(key).map(Rc::new);
        self.keep_info(key, info.clone());
        info
    }

    /// What [`TypeSystem::info`] kept for `key`: `None` when it was never asked.
    #[inline]
    fn info_kept(&self, key: TypeKey) -> Option<&Option<Rc<TypeInfo>>> {
        if key.module == 0 {
            self.own_infos.get(key.rid)
        } else {
            self.infos.get(&key)
        }
    }

    /// Keeps `info` for `key` (a row past its table is not kept: it cannot be read).
    fn keep_info(&mut self, key: TypeKey, info: Option<Rc<TypeInfo>>) {
        if key.module == 0 {
            let rows = self.current.tables().rows(Table::TypeDef);
            self.own_infos.put(key.rid, rows, info);
        } else {
            self.infos.insert(key, info);
        }
    }

    fn read_info(&mut self, key: TypeKey) -> Option<TypeInfo> {
        let (row, system, is_enum, ifaces, generics, next_fields, corlib) = {
            let (img, idx) = self.module(key.module)?;
            let t = img.tables();
            let row = t.type_def(key.rid).ok()?;
            let s = img.strings();
            // The reads of `def_name`, which must succeed here too; the name itself is
            // written only for messages.
            let name = s.get(row.name).ok()?;
            let ns = s.get(row.namespace).ok()?;
            let (outer, nested) = enclosing_chain(img, idx, key.rid)?;
            let ns = match t.type_def(outer) {
                Ok(orow) if outer != key.rid => s.get(orow.namespace).ok()?,
                _ => ns,
            };
            let ifaces: Vec<Token> = idx.interfaces(img, key.rid).collect();
            let generics: Vec<u16> = idx.generics(img, key.rid).collect();
            let next_fields = if key.rid < t.rows(Table::TypeDef) {
                t.type_def(key.rid + 1).ok()?.field_list
            } else {
                t.rows(Table::Field) + 1
            };
            (
                row,
                ns == "System",
                // A nested type's name is `Outer/Name`: never `Enum`.
                !nested && name == "Enum",
                ifaces,
                generics,
                next_fields,
                idx.is_corlib(img),
            )
        };
        let base = if row.extends.is_null() {
            None
        } else {
            Some(self.type_token(key.module, row.extends))
        };
        let interfaces = ifaces
            .into_iter()
            .map(|t| self.type_token(key.module, t))
            .collect();
        let is_interface = row.flags & 0x20 != 0;
        let base_name = base.and_then(|b| self.system_name(b));
        let own_system = corlib && system;
        let base_unknown = base.is_some_and(|b| self.tys.has_unknown(b));
        let kind = if is_interface {
            Kind::Interface
        } else if base_unknown {
            // Class, value type or enum: the base decides, and it could not be read.
            Kind::Unknown
        } else if base_name == Some("Enum") && !(own_system && is_enum) {
            Kind::Enum(self.enum_underlying(key, row.field_list, next_fields))
        } else if base_name == Some("ValueType") && !(own_system && is_enum) {
            Kind::Value
        } else {
            Kind::Class
        };
        Some(TypeInfo {
            kind,
            base,
            interfaces,
            generic_params: generics,
        })
    }

    /// The full name of a TypeDef: `Namespace.Name`, nested types as `Outer/Inner` (the
    /// namespace of the outermost); `None` when its rows cannot be read.
    pub fn def_name(&self, key: TypeKey) -> Option<String> {
        let (img, _) = self.module(key.module)?;
        let t = img.tables();
        let s = img.strings();
        let row = t.type_def(key.rid).ok()?;
        let mut name = s.get(row.name).ok()?.to_string();
        let mut ns = s.get(row.namespace).ok()?;
        let mut outer = key.rid;
        for _ in 0..MAX_DEPTH {
            match t.enclosing_type(outer).ok().flatten() {
                Some(o) => {
                    let orow = t.type_def(o).ok()?;
                    name = format!("{}/{}", s.get(orow.name).ok()?, name);
                    outer = o;
                }
                None => break,
            }
        }
        if outer != key.rid
            && let Ok(orow) = t.type_def(outer)
        {
            ns = s.get(orow.namespace).ok()?;
        }
        Some(if ns.is_empty() {
            name
        } else {
            format!("{ns}.{name}")
        })
    }

    /// Whether `t` is a delegate type: a class whose base class is the core library's
    /// `System.MulticastDelegate` (or `System.Delegate`); `None` when that cannot be told.
    pub fn is_delegate(&mut self, t: TyId) -> Option<bool> {
        let key = self.key_of(t)?;
        let base = self.info(key)?.base?;
        if matches!(self.tys.node(base), TyNode::Unknown) {
            return None;
        }
        Some(matches!(
            self.system_name(base),
            Some("MulticastDelegate" | "Delegate")
        ))
    }

    /// Whether the method a token of the image being verified names (MethodDef, MemberRef or
    /// MethodSpec) may be overridden: virtual, not final, and declared by a type that is not
    /// sealed (III.3.19). `None` when its definition cannot be found: a reference that does
    /// not resolve, or names a method its type does not declare itself (an inherited one).
    pub fn overridable(&mut self, token: Token) -> Option<bool> {
        if let Some(&known) = self.overridable.get(&token.0) {
            return known;
        }
        let found = if self.names_ctor(token) {
            // Constructors are never virtual: no lookup for the most common reference.
            Some(false)
        } else {
            self.definition(token).and_then(|(m, rid, owner)| {
                let (img, _) = self.module(m)?;
                let t = img.tables();
                let flags = t.method_def(rid).ok()?.flags;
                let sealed = t.type_def(owner).ok()?.flags & 0x100 != 0;
                // Virtual (0x40), not final (0x20).
                Some(flags & 0x60 == 0x40 && !sealed)
            })
        };
        self.overridable.insert(token.0, found);
        found
    }

    /// Whether a MemberRef of the image being verified names an instance constructor.
    fn names_ctor(&self, token: Token) -> bool {
        token.table() == Some(Table::MemberRef)
            && self
                .current
                .tables()
                .member_ref(token.rid())
                .is_ok_and(|r| heap_str(self.current.strings().data, r.name) == Some(b".ctor"))
    }

    /// The MethodDef a method token of the image being verified names: its module, its row
    /// and its declaring TypeDef's row. A MemberRef is found by name and signature among its
    /// type's own methods.
    fn definition(&mut self, token: Token) -> Option<(u32, u32, u32)> {
        match token.table()? {
            Table::MethodDef => Some((0, token.rid(), self.owner(token.rid(), false).ok()??)),
            Table::MethodSpec => {
                let row = self.current.tables().method_spec(token.rid()).ok()?;
                self.definition(row.method)
            }
            Table::MemberRef => self.member_definition(token.rid()),
            _ => None,
        }
    }

    /// [`TypeSystem::definition`] of MemberRef `rid`.
    fn member_definition(&mut self, rid: u32) -> Option<(u32, u32, u32)> {
        let current = self.current;
        let row = current.tables().member_ref(rid).ok()?;
        let name = heap_str(current.strings().data, row.name)?;
        if !matches!(
            row.class.table(),
            Some(Table::TypeDef | Table::TypeRef | Table::TypeSpec)
        ) {
            return None;
        }
        let owner = self.type_token(0, row.class);
        let key = self.key_of(owner)?;
        let want = self.method_sig(0, row.signature)?;
        let md = self.handle(key.module)?;
        let img = md.img();
        let t = img.tables();
        let (first, end) = t.method_span(key.rid)?;
        let strings = img.strings().data;
        for method in first..end.min(t.rows(Table::MethodDef) + 1) {
            let row = t.method_def(method).ok()?;
            if heap_str(strings, row.name) != Some(name) {
                continue;
            }
            let sig = self.method_sig(key.module, row.signature)?;
            if self.same_shape(&sig, &want) {
                return Some((key.module, method, key.rid));
            }
        }
        None
    }

    /// Whether two signatures read unsubstituted (a definition's and a reference's to it)
    /// spell the same method: calling convention, return and parameter types.
    fn same_shape(&self, a: &MethodSig, b: &MethodSig) -> bool {
        a.has_this == b.has_this
            && a.explicit_this == b.explicit_this
            && a.vararg == b.vararg
            && a.generic_params == b.generic_params
            && a.ret == b.ret
            && self.params(a) == self.params(b)
    }

    /// The signature of a delegate type's `Invoke` method, in the delegate's instantiation
    /// (`Func<int32>`'s returns `int32`): `None` when the type or its method list cannot be
    /// read (a MethodPtr indirection is not followed), or it has no `Invoke`.
    pub fn delegate_invoke(&mut self, delegate: TyId) -> Option<MethodSig> {
        let key = self.key_of(delegate)?;
        let token = {
            let (img, _) = self.module(key.module)?;
            let t = img.tables();
            let (first, end) = t.method_span(key.rid)?;
            let s = img.strings();
            (first..end.min(t.rows(Table::MethodDef) + 1)).find(|&rid| {
                t.method_def(rid).ok().and_then(|row| s.get(row.name).ok()) == Some("Invoke")
            })?
        };
        let sig = self.method_in(key.module, Token::new(Table::MethodDef, token), &[])?;
        let class_args = self.args_of(delegate);
        Some(self.subst_sig(sig, delegate, &class_args, &[]))
    }

    /// `Name` when `t` is the core library's `System.Name` class or value type.
    fn system_name(&mut self, t: TyId) -> Option<&'static str> {
        let key = match self.tys.node(t) {
            TyNode::Class(k) | TyNode::Value(k) => *k,
            TyNode::Object => return Some("Object"),
            _ => return None,
        };
        let (img, idx) = self.module(key.module)?;
        if !idx.is_corlib(img) {
            return None;
        }
        let row = img.tables().type_def(key.rid).ok()?;
        let s = img.strings();
        if s.get(row.namespace).ok()? != "System" {
            return None;
        }
        match s.get(row.name).ok()? {
            "Enum" => Some("Enum"),
            "ValueType" => Some("ValueType"),
            "Array" => Some("Array"),
            "Delegate" => Some("Delegate"),
            "MulticastDelegate" => Some("MulticastDelegate"),
            "Nullable`1" => Some("Nullable`1"),
            _ => None,
        }
    }

    /// The underlying type of an enum: the type of its first instance field.
    fn enum_underlying(&mut self, key: TypeKey, first: u32, end: u32) -> Option<Prim> {
        let md = self.handle(key.module)?;
        let blob = {
            let img = md.img();
            let t = img.tables();
            if t.rows(Table::FieldPtr) > 0 {
                return None;
            }
            let mut found = None;
            for rid in first..end.min(t.rows(Table::Field) + 1) {
                let row = t.field(rid).ok()?;
                if row.flags & 0x10 == 0 {
                    found = Some(img.blobs().get(row.signature).ok()?);
                    break;
                }
            }
            found?
        };
        let t = self.field_sig(key.module, blob)?;
        match self.tys.node(t) {
            TyNode::Prim(p) => Some(*p),
            _ => None,
        }
    }

    /// The TypeDef of a class, value type or instance.
    pub fn key_of(&self, t: TyId) -> Option<TypeKey> {
        match self.tys.node(t) {
            TyNode::Class(k) | TyNode::Value(k) | TyNode::Inst { def: k, .. } => Some(*k),
            TyNode::Object | TyNode::String | TyNode::TypedRef | TyNode::Prim(_) => {
                self.wk_keys.get(&t).copied()
            }
            _ => None,
        }
    }

    /// [`TypeSystem::key_of`], looking the well-known types up in the core library when no
    /// signature has named them yet (`ldstr` pushes `string` without a token).
    fn def_of(&mut self, t: TyId) -> Option<TypeKey> {
        if let Some(k) = self.key_of(t) {
            return Some(k);
        }
        let full = match self.tys.node(t) {
            TyNode::Object => "System.Object",
            TyNode::String => "System.String",
            TyNode::TypedRef => "System.TypedReference",
            TyNode::Prim(p) => match p {
                Prim::Bool => "System.Boolean",
                Prim::Char => "System.Char",
                Prim::I1 => "System.SByte",
                Prim::U1 => "System.Byte",
                Prim::I2 => "System.Int16",
                Prim::U2 => "System.UInt16",
                Prim::I4 => "System.Int32",
                Prim::U4 => "System.UInt32",
                Prim::I8 => "System.Int64",
                Prim::U8 => "System.UInt64",
                Prim::R4 => "System.Single",
                Prim::R8 => "System.Double",
                Prim::I => "System.IntPtr",
                Prim::U => "System.UIntPtr",
            },
            _ => return None,
        };
        // Resolving it records the key.
        self.well_known(full);
        self.key_of(t)
    }

    /// Kind of a type's definition, when it has one that could be read.
    pub fn kind(&mut self, t: TyId) -> Option<Kind> {
        let k = self.key_of(t)?;
        self.info(k).map(|i| i.kind)
    }

    /// Whether values of `t` are value types (primitives, structs, enums, `typedref`);
    /// `None` for generic parameters and unknown types.
    #[inline]
    pub fn is_value_type(&mut self, t: TyId) -> Option<bool> {
        if let Some(Some(v)) = self.value_types.get(t.0 as usize) {
            return *v;
        }
        self.is_value_type_first(t)
    }

    /// [`TypeSystem::is_value_type`] the first time `t` is asked about: worked out and kept.
    #[cold]
    #[inline(never)]
    fn is_value_type_first(&mut self, t: TyId) -> Option<bool> {
        let v = self.is_value_type_uncached(t);
        let i = t.0 as usize;
        if self.value_types.len() <= i {
            self.value_types.resize(i + 1, None);
        }
        self.value_types[i] = Some(v);
        v
    }

    fn is_value_type_uncached(&mut self, t: TyId) -> Option<bool> {
        // Matched in place: an instance's arguments are not cloned.
        match *self.tys.node(t) {
            TyNode::Value(_) | TyNode::Class(_) | TyNode::Inst { .. } => match self.kind(t) {
                Some(Kind::Value | Kind::Enum(_)) => Some(true),
                Some(Kind::Class | Kind::Interface) => Some(false),
                Some(Kind::Unknown) | None => None,
            },
            TyNode::Prim(_) | TyNode::TypedRef => Some(true),
            TyNode::Object | TyNode::String | TyNode::SzArray(_) | TyNode::Array(..) => Some(false),
            TyNode::Ptr(_) | TyNode::FnPtr | TyNode::ByRef(_) => Some(true),
            TyNode::Unknown | TyNode::Void | TyNode::Var(_) | TyNode::MVar(_) => None,
        }
    }

    /// Pushes the direct supertypes of `t` (base type and declared interfaces, with `t`'s
    /// arguments substituted) onto `out`; false, pushing nothing, when its definition cannot
    /// be read. The arguments are copied into a buffer kept between calls (no clone of the
    /// node).
    fn supertypes(&mut self, t: TyId, out: &mut Vec<TyId>) -> bool {
        let mut args = std::mem::take(&mut self.super_args);
        args.clear();
        let key = match self.tys.node(t) {
            TyNode::Inst { def, args: a, .. } => {
                args.extend_from_slice(a);
                Some(*def)
            }
            TyNode::SzArray(_) | TyNode::Array(..) => {
                self.super_args = args;
                let a = self.well_known("System.Array");
                out.push(a);
                return true;
            }
            _ => None,
        };
        let read = self.push_supertypes(t, key, &args, out);
        self.super_args = args;
        read
    }

    /// [`TypeSystem::supertypes`] of `t`, whose definition is `key` (else found from `t`)
    /// with arguments `args`.
    fn push_supertypes(
        &mut self,
        t: TyId,
        key: Option<TypeKey>,
        args: &[TyId],
        out: &mut Vec<TyId>,
    ) -> bool {
        let Some(key) = key.or_else(|| self.def_of(t)) else {
            return false;
        };
        let Some(info) = self.info(key) else {
            return false;
        };
        if let Some(b) = info.base {
            out.push(self.tys.subst(b, args, &[]));
        }
        for &i in &info.interfaces {
            out.push(self.tys.subst(i, args, &[]));
        }
        if info.base.is_none() && info.kind == Kind::Interface {
            out.push(TyId::OBJECT);
        }
        true
    }

    /// Whether a reference of type `from` may be used where `to` is expected (III.1.8.1.2.3,
    /// for object types: `from` is `to`, derives from it, or implements it).
    pub fn assignable(&mut self, from: TyId, to: TyId) -> Ans {
        if from == to {
            return Ans::Yes;
        }
        if to == TyId::OBJECT && !self.tys.has_unknown(from) {
            // The first rules of `assignable_uncached`, answered without the cache.
            return match self.is_value_type(from) {
                Some(_) => Ans::Yes,
                None => Ans::Unknown,
            };
        }
        if let Some(&a) = self.assignable_cache.get(&(from, to)) {
            return a;
        }
        let a = self.assignable_uncached(from, to);
        self.assignable_cache.insert((from, to), a);
        a
    }

    fn assignable_uncached(&mut self, from: TyId, to: TyId) -> Ans {
        if self.tys.has_unknown(from) || self.tys.has_unknown(to) {
            return Ans::Unknown;
        }
        if to == TyId::OBJECT {
            return match self.is_value_type(from) {
                // A boxed value is an object too; the caller knows which it has.
                Some(_) => Ans::Yes,
                None => Ans::Unknown,
            };
        }
        if self.tys.has_generic_param(from) || self.tys.has_generic_param(to) {
            return Ans::Unknown;
        }
        // Arrays: covariance and the interfaces arrays implement are not modelled beyond
        // `System.Array`.
        let from_array = matches!(self.tys.node(from), TyNode::SzArray(_) | TyNode::Array(..));
        let to_array = matches!(self.tys.node(to), TyNode::SzArray(_) | TyNode::Array(..));
        if from_array || to_array {
            if from_array && self.system_name(to) == Some("Array") {
                return Ans::Yes;
            }
            return self.array_assignable(from, to);
        }
        // The walk's set and queue are kept between calls (taken: a nested walk gets its own).
        let mut seen = std::mem::take(&mut self.walk_seen);
        let mut queue = std::mem::take(&mut self.walk_queue);
        seen.clear();
        queue.clear();
        queue.push(from);
        let answer = self.walk_supertypes(to, &mut seen, &mut queue);
        self.walk_seen = seen;
        self.walk_queue = queue;
        answer
    }

    /// The walk of [`TypeSystem::assignable_uncached`] up from the types in `queue`.
    fn walk_supertypes(&mut self, to: TyId, seen: &mut FxSet<TyId>, queue: &mut Vec<TyId>) -> Ans {
        let mut unsure = false;
        let to_def = self.key_of(to);
        while let Some(t) = queue.pop() {
            if !seen.insert(t) || seen.len() > MAX_SUPERTYPES {
                if seen.len() > MAX_SUPERTYPES {
                    return Ans::Unknown;
                }
                continue;
            }
            if t == to {
                return Ans::Yes;
            }
            if self.tys.has_unknown(t) {
                unsure = true;
                continue;
            }
            // The same generic definition with other arguments: variance decides.
            if let (TyNode::Inst { def, .. }, Some(d)) = (self.tys.node(t), to_def)
                && *def == d
            {
                unsure = true;
            }
            if !self.supertypes(t, queue) {
                unsure = true;
            }
        }
        if unsure { Ans::Unknown } else { Ans::No }
    }

    fn array_assignable(&mut self, from: TyId, to: TyId) -> Ans {
        match (self.tys.node(from).clone(), self.tys.node(to).clone()) {
            (TyNode::SzArray(a), TyNode::SzArray(b)) => self.element_assignable(a, b),
            (TyNode::Array(a, r1), TyNode::Array(b, r2)) if r1 == r2 => {
                self.element_assignable(a, b)
            }
            (TyNode::SzArray(_) | TyNode::Array(..), TyNode::SzArray(_) | TyNode::Array(..)) => {
                Ans::No
            }
            // An array against a class or interface other than `System.Array` and `object`
            // (`IList<T>`, `ICloneable`, …), or a class against an array: not modelled.
            _ => Ans::Unknown,
        }
    }

    fn element_assignable(&mut self, a: TyId, b: TyId) -> Ans {
        match (self.tys.node(a).clone(), self.tys.node(b).clone()) {
            (TyNode::Prim(x), TyNode::Prim(y)) => {
                // int[] and uint[] are interchangeable at run time (I.8.7.1).
                if x.reduced() == y.reduced() {
                    Ans::Yes
                } else {
                    Ans::No
                }
            }
            _ => match (self.is_value_type(a), self.is_value_type(b)) {
                (Some(false), Some(false)) => self.assignable(a, b),
                (Some(true), Some(true)) => {
                    if a == b {
                        Ans::Yes
                    } else {
                        Ans::Unknown
                    }
                }
                (Some(_), Some(_)) => Ans::No,
                _ => Ans::Unknown,
            },
        }
    }

    /// The closest common supertype of two object types at a join (III.1.8.1.3): one of them
    /// when the other is assignable to it, else the first base class of `a` that `b` is
    /// assignable to, else `object`; [`TyId::UNKNOWN`] when that cannot be told.
    pub fn merge(&mut self, a: TyId, b: TyId) -> TyId {
        if a == b {
            return a;
        }
        match self.assignable(b, a) {
            Ans::Yes => return a,
            Ans::Unknown => return TyId::UNKNOWN,
            Ans::No => {}
        }
        match self.assignable(a, b) {
            Ans::Yes => return b,
            Ans::Unknown => return TyId::UNKNOWN,
            Ans::No => {}
        }
        let mut cur = a;
        for _ in 0..MAX_SUPERTYPES {
            let base = match self.tys.node(cur) {
                TyNode::SzArray(_) | TyNode::Array(..) => Some(self.well_known("System.Array")),
                _ => {
                    let Some(k) = self.def_of(cur) else {
                        return TyId::UNKNOWN;
                    };
                    let args = self.args_of(cur);
                    match self.info(k) {
                        Some(i) => i.base.map(|b| self.tys.subst(b, &args, &[])),
                        None => return TyId::UNKNOWN,
                    }
                }
            };
            let Some(base) = base else {
                return TyId::OBJECT;
            };
            match self.assignable(b, base) {
                Ans::Yes => return base,
                Ans::Unknown => return TyId::UNKNOWN,
                Ans::No => cur = base,
            }
        }
        TyId::UNKNOWN
    }

    /// The simple name of the assembly defining a class, value type or instance (its
    /// definition's), for messages.
    pub fn defined_in(&self, t: TyId) -> Option<&str> {
        let key = self.key_of(t)?;
        match key.module {
            0 => Some(self.current_name.as_str()),
            m => self.refs.get(m as usize - 1).map(|l| l.name.as_str()),
        }
    }

    /// The ILAsm-style name of a type, for messages.
    pub fn name(&mut self, t: TyId) -> String {
        let mut out = String::new();
        self.write_name(t, &mut out, 0);
        out
    }

    fn write_name(&mut self, t: TyId, out: &mut String, depth: u32) {
        if depth > MAX_DEPTH {
            out.push('…');
            return;
        }
        match self.tys.node(t).clone() {
            TyNode::Unknown => out.push_str("(unresolved)"),
            TyNode::Void => out.push_str("void"),
            TyNode::Object => out.push_str("object"),
            TyNode::String => out.push_str("string"),
            TyNode::TypedRef => out.push_str("typedref"),
            TyNode::Prim(p) => out.push_str(p.name()),
            TyNode::Class(k) | TyNode::Value(k) => match self.info(k).and(self.def_name(k)) {
                Some(name) => out.push_str(&name),
                None => out.push_str("(unreadable type)"),
            },
            TyNode::Inst { def, args, .. } => {
                match self.info(def).and(self.def_name(def)) {
                    Some(name) => {
                        // `Outer`1/Inner`1` reads `Outer/Inner<…>`: arity suffixes dropped.
                        for (n, part) in name.split('/').enumerate() {
                            if n > 0 {
                                out.push('/');
                            }
                            out.push_str(part.split('`').next().unwrap_or(part));
                        }
                    }
                    None => out.push_str("(unreadable type)"),
                }
                out.push('<');
                for (n, a) in args.iter().enumerate() {
                    if n > 0 {
                        out.push(',');
                    }
                    self.write_name(*a, out, depth + 1);
                }
                out.push('>');
            }
            TyNode::Var(n) => out.push_str(&format!("!{n}")),
            TyNode::MVar(n) => out.push_str(&format!("!!{n}")),
            TyNode::SzArray(e) => {
                self.write_name(e, out, depth + 1);
                out.push_str("[]");
            }
            TyNode::Array(e, r) => {
                self.write_name(e, out, depth + 1);
                out.push('[');
                for _ in 1..r {
                    out.push(',');
                }
                out.push(']');
            }
            TyNode::Ptr(e) => {
                self.write_name(e, out, depth + 1);
                out.push('*');
            }
            TyNode::ByRef(e) => {
                self.write_name(e, out, depth + 1);
                out.push('&');
            }
            TyNode::FnPtr => out.push_str("method *"),
        }
    }

    /// Number of referenced assemblies this image's checks opened.
    pub fn references_used(&self) -> usize {
        self.refs.len()
    }
}

/// The bytes of the string at `at` in a `#Strings` heap, up to its NUL (no UTF-8 check: names
/// are compared, not read).
/// Whether a method token of `image` names a method called `.ctor` (a MethodDef, or a
/// MemberRef; a MethodSpec never does: constructors are not generic).
fn names_dot_ctor(image: &Image<'_>, token: Token) -> bool {
    let tables = image.tables();
    // The name column alone: a whole row costs a read per column.
    let name = match token.table() {
        Some(Table::MethodDef) => tables.cell(Table::MethodDef, token.rid(), 3),
        Some(Table::MemberRef) => tables.cell(Table::MemberRef, token.rid(), 1),
        _ => return false,
    };
    // `.ctor` and its NUL, compared in place: no scan for the end of a longer name.
    name.is_ok_and(|n| {
        let data = image.strings().data;
        data.get(n as usize..n as usize + 6) == Some(b".ctor\0")
    })
}

fn heap_str(data: &[u8], at: u32) -> Option<&[u8]> {
    let rest = data.get(at as usize..)?;
    let len = memchr::memchr(0, rest)?;
    Some(&rest[..len])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The owners table answers as `Tables::declaring_type` and `field_declaring_type` do, for
    /// every row of the embedded corpus and one past the end.
    #[test]
    fn list_owners_agree_with_the_tables() {
        for (name, bytes) in crate::corpus::EMBEDDED {
            let image = Image::parse(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            let t = image.tables();
            for (table, ptr, col) in [
                (Table::MethodDef, Table::MethodPtr, 5),
                (Table::Field, Table::FieldPtr, 4),
            ] {
                let owners = list_owners(&t, table, ptr, col).expect("ordered lists");
                for rid in 0..=t.rows(table) + 1 {
                    let want = if table == Table::Field {
                        t.field_declaring_type(rid)
                    } else {
                        t.declaring_type(rid)
                    }
                    .expect("readable");
                    let got = owners.get(rid as usize).copied().filter(|&r| r != 0);
                    assert_eq!(got, want, "{name} {table:?} {rid}");
                }
            }
        }
    }

    /// `first_top` finds the core library's `System.Object` as the index does.
    #[test]
    fn first_top_agrees_with_the_index() {
        for (name, bytes) in crate::corpus::EMBEDDED {
            let image = Image::parse(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            let index = ModuleIndex::default();
            let t = image.tables();
            let s = image.strings();
            for rid in 1..=t.rows(Table::TypeDef) {
                let row = t.type_def(rid).expect("readable");
                let (ns, n) = (s.get(row.namespace).unwrap(), s.get(row.name).unwrap());
                assert_eq!(
                    first_top(&image, ns, n),
                    index.top(&image, ns, n),
                    "{name} {ns}.{n}"
                );
            }
        }
    }
}
