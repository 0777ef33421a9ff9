// A probe weaver of the kind APM agents ship, written with Mono.Cecil 0.11 (the one in mono's
// GAC), and the same weaver with one seeded bug at a time: the sample rewriters ilcheck's fuzzer
// and tests run.
//
//   mono weaver.exe [--bug NAME] IN OUT
//
// Every method with an IL body gets
//
//   ldstr "Type::Method"; ldc.i4 TOKEN; call void [Acme.Probe]Acme.Probe::Enter(string, int32)
//   .try {
//     <original body; every `ret` becomes `stloc R; leave EPILOGUE` (`leave EPILOGUE` when void)>
//   } finally {
//     ldstr "Type::Method"; call void [Acme.Probe]Acme.Probe::Exit(string); endfinally
//   }
//   EPILOGUE: ldloc R; ret                                  (`ret` when void)
//
// The probe is referenced by name (assembly `Acme.Probe`, version 0.0.0.0, no public key: what
// `mcs -target:library -out:Acme.Probe.dll corpus/probe/probe.cs` builds), so weaving needs no
// probe assembly; running the output needs Acme.Probe.dll beside it.
//
// Constructors and static constructors are woven too. The only methods left alone are those
// without a body (abstract, extern, runtime-implemented) and those containing `jmp`, which must
// leave the method with an empty stack and cannot sit inside a try.
//
// The weaver reads IN into memory and writes OUT only; exit 0 when OUT is written, 1 when IN
// cannot be read or written out (message on standard error), 2 on a usage error.
//
// --bug NAME seeds one bug of the kinds shipped weavers have (see corpus/README.md):
//   short-branches          short branches are not widened before the edit nor chosen again
//                           after it, so one across grown code is written with a wrapped
//                           displacement (Cecil writes the sbyte unchecked)
//   retarget-to-probe       branches and clause starts aimed at the original first instruction
//                           go to the prologue instead, which lies outside the new try
//   ret-in-try              the last `ret` is left in place, inside the new try
//   handler-end-off-by-one  the new finally ends one instruction early, before its endfinally
//   enclosing-first         the new enclosing clause is listed before the clauses it encloses
//   max-stack-kept          the header keeps the original MaxStack (Cecil recomputes it on
//                           write, so the written header is patched back, as a writer told to
//                           keep MaxStack would leave it)
//   tail-calls-kept         `tail.` prefixes stay, so a tail call is followed by the new
//                           `stloc; leave` instead of its `ret`, inside a try
//   clause-grown            clauses that ran to the end of the body are not ended explicitly,
//                           so they grow over the appended finally and epilogue (Cecil's
//                           HandlerEnd == null means "the end of the code")
//   probe-arg-type          the prologue passes the method token as an int64 (`ldc.i8`) to the
//                           probe's int32 parameter: a probe called with arguments of another
//                           type than its signature (the runtime may reject or truncate it)
//   result-local-object     the return value's local is `object` when the method returns a value
//                           type other than a primitive, as if every result were a reference:
//                           a struct is stored where an object reference is expected
using System;
using System.Collections.Generic;
using System.IO;
using Mono.Cecil;
using Mono.Cecil.Cil;
using Mono.Collections.Generic;

static class Weaver
{
    static readonly string[] BugNames =
    {
        "short-branches", "retarget-to-probe", "ret-in-try", "handler-end-off-by-one",
        "enclosing-first", "max-stack-kept", "tail-calls-kept", "clause-grown",
        "probe-arg-type", "result-local-object",
    };

    static int Main(string[] args)
    {
        string bug = null;
        var paths = new List<string>();
        for (int i = 0; i < args.Length; i++)
        {
            if (args[i] == "--bug")
            {
                if (i + 1 == args.Length)
                    return Usage("--bug needs a name");
                bug = args[++i];
                if (Array.IndexOf(BugNames, bug) < 0)
                    return Usage("unknown bug '" + bug + "' (known: " + string.Join(", ", BugNames) + ")");
            }
            else if (args[i].StartsWith("-") && args[i].Length > 1)
                return Usage("unknown option '" + args[i] + "'");
            else
                paths.Add(args[i]);
        }
        if (paths.Count != 2)
            return Usage("expected IN and OUT");
        if (Path.GetFullPath(paths[0]) == Path.GetFullPath(paths[1]))
            return Usage("OUT must not be IN");
        byte[] output;
        int woven, skipped;
        try
        {
            output = Weave(File.ReadAllBytes(paths[0]), bug, out woven, out skipped);
        }
        catch (Exception e)
        {
            Console.Error.WriteLine("weaver: " + paths[0] + ": " + e.GetType().Name + ": " + e.Message);
            return 1;
        }
        try
        {
            File.WriteAllBytes(paths[1], output);
        }
        catch (Exception e)
        {
            Console.Error.WriteLine("weaver: " + paths[1] + ": " + e.Message);
            return 1;
        }
        Console.WriteLine("weaver: " + woven + " methods woven, " + skipped + " left alone (jmp)");
        return 0;
    }

    static int Usage(string why)
    {
        Console.Error.WriteLine("weaver: " + why);
        Console.Error.WriteLine("usage: mono weaver.exe [--bug " + string.Join("|", BugNames) + "] IN OUT");
        return 2;
    }

    // The probe methods, referenced by name.
    sealed class Probe
    {
        public MethodReference Enter, Exit;

        public Probe(ModuleDefinition module)
        {
            AssemblyNameReference scope = null;
            foreach (var r in module.AssemblyReferences)
                if (r.Name == "Acme.Probe")
                    scope = r;
            if (scope == null)
            {
                scope = new AssemblyNameReference("Acme.Probe", new Version(0, 0, 0, 0));
                module.AssemblyReferences.Add(scope);
            }
            var type = new TypeReference("Acme", "Probe", module, scope);
            Enter = new MethodReference("Enter", module.TypeSystem.Void, type);
            Enter.Parameters.Add(new ParameterDefinition(module.TypeSystem.String));
            Enter.Parameters.Add(new ParameterDefinition(module.TypeSystem.Int32));
            Exit = new MethodReference("Exit", module.TypeSystem.Void, type);
            Exit.Parameters.Add(new ParameterDefinition(module.TypeSystem.String));
        }
    }

    static byte[] Weave(byte[] input, string bug, out int woven, out int skipped)
    {
        var module = ModuleDefinition.ReadModule(new MemoryStream(input));
        var probe = new Probe(module);
        var methods = Methods(module);
        // max-stack-kept: each woven method's MaxStack as it was read.
        var kept = new Dictionary<MethodDefinition, int>();
        woven = skipped = 0;
        foreach (var m in methods)
        {
            if (!m.HasBody)
                continue;
            if (HasJmp(m.Body))
            {
                skipped++;
                continue;
            }
            kept[m] = m.Body.MaxStackSize;
            WeaveMethod(m, probe, bug);
            woven++;
        }
        var written = new MemoryStream();
        module.Write(written);
        var bytes = written.ToArray();
        if (bug == "max-stack-kept")
            KeepMaxStack(bytes, methods, kept);
        return bytes;
    }

    // Every method of every type, depth first: a type's methods, then its nested types'. The
    // same module read twice lists the same methods in the same order.
    static List<MethodDefinition> Methods(ModuleDefinition module)
    {
        var all = new List<MethodDefinition>();
        var types = new Stack<TypeDefinition>();
        for (int i = module.Types.Count - 1; i >= 0; i--)
            types.Push(module.Types[i]);
        while (types.Count > 0)
        {
            var t = types.Pop();
            all.AddRange(t.Methods);
            for (int i = t.NestedTypes.Count - 1; i >= 0; i--)
                types.Push(t.NestedTypes[i]);
        }
        return all;
    }

    static bool HasJmp(MethodBody body)
    {
        foreach (var ins in body.Instructions)
            if (ins.OpCode.Code == Code.Jmp)
                return true;
        return false;
    }

    static void WeaveMethod(MethodDefinition m, Probe probe, string bug)
    {
        var body = m.Body;
        var code = body.Instructions;
        var il = body.GetILProcessor();
        bool relayout = bug != "short-branches";
        if (relayout)
            Branches.Widen(code);
        if (bug != "tail-calls-kept")
            RemoveTailPrefixes(body);

        string name = m.DeclaringType.FullName + "::" + m.Name;
        bool isVoid = m.ReturnType.MetadataType == MetadataType.Void;
        VariableDefinition result = null;
        if (!isVoid)
        {
            var type = m.ReturnType;
            if (bug == "result-local-object" && type.IsValueType && !type.IsPrimitive)
                type = m.Module.TypeSystem.Object;
            result = new VariableDefinition(type);
            body.Variables.Add(result);
        }

        // The new finally handler and the epilogue, appended after the original code.
        var handlerStart = il.Create(OpCodes.Ldstr, name);
        var endfinally = il.Create(OpCodes.Endfinally);
        var epilogue = isVoid ? il.Create(OpCodes.Ret) : Load(il, result);
        var first = code[0];

        // Returns become leaves to the epilogue. The `ret` instruction itself becomes the
        // store (or the leave), so branches aimed at it still land on the same code.
        var rets = new List<Instruction>();
        foreach (var ins in code)
            if (ins.OpCode.Code == Code.Ret)
                rets.Add(ins);
        if (bug == "ret-in-try" && rets.Count > 0)
            rets.RemoveAt(rets.Count - 1);
        foreach (var ret in rets)
        {
            if (isVoid)
            {
                ret.OpCode = OpCodes.Leave;
                ret.Operand = epilogue;
            }
            else
            {
                Store(ret, result);
                il.InsertAfter(ret, il.Create(OpCodes.Leave, epilogue));
            }
        }

        // A clause that ran to the end of the code (Cecil: end == null) ends where the original
        // code ended, not after what is appended.
        if (bug != "clause-grown")
        {
            foreach (var h in body.ExceptionHandlers)
            {
                if (h.TryEnd == null)
                    h.TryEnd = handlerStart;
                if (h.HandlerEnd == null)
                    h.HandlerEnd = handlerStart;
            }
        }

        var prologue = new[]
        {
            il.Create(OpCodes.Ldstr, name),
            bug == "probe-arg-type"
                ? il.Create(OpCodes.Ldc_I8, (long)m.MetadataToken.ToInt32())
                : il.Create(OpCodes.Ldc_I4, m.MetadataToken.ToInt32()),
            il.Create(OpCodes.Call, probe.Enter),
        };
        foreach (var ins in prologue)
            il.InsertBefore(first, ins);
        il.Append(handlerStart);
        il.Append(il.Create(OpCodes.Call, probe.Exit));
        il.Append(endfinally);
        il.Append(epilogue);
        if (!isVoid)
            il.Append(il.Create(OpCodes.Ret));

        if (bug == "retarget-to-probe")
            Retarget(body, first, prologue[0]);

        var clause = new ExceptionHandler(ExceptionHandlerType.Finally)
        {
            TryStart = first,
            TryEnd = handlerStart,
            HandlerStart = handlerStart,
            HandlerEnd = bug == "handler-end-off-by-one" ? endfinally : epilogue,
        };
        // Inner clauses come first: the new outermost one goes last.
        if (bug == "enclosing-first")
            body.ExceptionHandlers.Insert(0, clause);
        else
            body.ExceptionHandlers.Add(clause);

        if (relayout)
            Branches.Shorten(code);
    }

    static Instruction Load(ILProcessor il, VariableDefinition v)
    {
        return il.Create(v.Index < 256 ? OpCodes.Ldloc_S : OpCodes.Ldloc, v);
    }

    static void Store(Instruction ins, VariableDefinition v)
    {
        ins.OpCode = v.Index < 256 ? OpCodes.Stloc_S : OpCodes.Stloc;
        ins.Operand = v;
    }

    // `tail.` must be followed by its call and `ret`; the `ret` becomes a leave, so the prefix
    // goes. Anything aimed at the prefix is aimed at its call instead.
    static void RemoveTailPrefixes(MethodBody body)
    {
        var code = body.Instructions;
        for (int i = code.Count - 2; i >= 0; i--)
        {
            if (code[i].OpCode.Code != Code.Tail)
                continue;
            Retarget(body, code[i], code[i + 1]);
            code.RemoveAt(i);
        }
    }

    // Every branch operand and clause boundary aimed at `from` is aimed at `to`.
    static void Retarget(MethodBody body, Instruction from, Instruction to)
    {
        foreach (var ins in body.Instructions)
        {
            if (ins.Operand as Instruction == from && ins != to)
                ins.Operand = to;
            var targets = ins.Operand as Instruction[];
            if (targets != null)
                for (int i = 0; i < targets.Length; i++)
                    if (targets[i] == from)
                        targets[i] = to;
        }
        foreach (var h in body.ExceptionHandlers)
        {
            if (h.TryStart == from) h.TryStart = to;
            if (h.TryEnd == from) h.TryEnd = to;
            if (h.HandlerStart == from) h.HandlerStart = to;
            if (h.HandlerEnd == from) h.HandlerEnd = to;
            if (h.FilterStart == from) h.FilterStart = to;
        }
    }

    // max-stack-kept: Cecil computes MaxStack from the instructions whenever it writes a body
    // (CodeWriter.ComputeHeader), so the bug of a writer that keeps the header's MaxStack is
    // made by writing the original value back into each woven method's fat header.
    static void KeepMaxStack(byte[] image, List<MethodDefinition> methods, Dictionary<MethodDefinition, int> kept)
    {
        var written = Methods(ModuleDefinition.ReadModule(new MemoryStream(image)));
        if (written.Count != methods.Count)
            throw new InvalidOperationException("the written module has a different number of methods");
        for (int i = 0; i < methods.Count; i++)
        {
            int maxStack;
            if (!kept.TryGetValue(methods[i], out maxStack))
                continue;
            if (written[i].FullName != methods[i].FullName)
                throw new InvalidOperationException("the written module lists its methods in another order");
            int at = FileOffset(image, written[i].RVA);
            if ((image[at] & 3) != 3)
                continue; // tiny header: MaxStack 8 is implied
            image[at + 2] = (byte)maxStack;
            image[at + 3] = (byte)(maxStack >> 8);
        }
    }

    static int FileOffset(byte[] image, int rva)
    {
        int pe = BitConverter.ToInt32(image, 0x3c);
        int sections = BitConverter.ToUInt16(image, pe + 6);
        int optionalHeader = BitConverter.ToUInt16(image, pe + 20);
        int table = pe + 24 + optionalHeader;
        for (int s = 0; s < sections; s++)
        {
            int row = table + 40 * s;
            int virtualSize = BitConverter.ToInt32(image, row + 8);
            int virtualAddress = BitConverter.ToInt32(image, row + 12);
            int rawSize = BitConverter.ToInt32(image, row + 16);
            int rawPointer = BitConverter.ToInt32(image, row + 20);
            if (rva >= virtualAddress && rva < virtualAddress + Math.Max(virtualSize, rawSize))
                return rva - virtualAddress + rawPointer;
        }
        throw new InvalidOperationException("RVA 0x" + rva.ToString("x") + " is in no section");
    }
}

// Branch forms: every branch long before an edit (so no displacement can overflow while code
// grows), then short again wherever the displacement fits.
static class Branches
{
    static readonly OpCode[,] Forms =
    {
        { OpCodes.Br_S, OpCodes.Br }, { OpCodes.Brfalse_S, OpCodes.Brfalse },
        { OpCodes.Brtrue_S, OpCodes.Brtrue }, { OpCodes.Beq_S, OpCodes.Beq },
        { OpCodes.Bne_Un_S, OpCodes.Bne_Un }, { OpCodes.Bge_S, OpCodes.Bge },
        { OpCodes.Bge_Un_S, OpCodes.Bge_Un }, { OpCodes.Bgt_S, OpCodes.Bgt },
        { OpCodes.Bgt_Un_S, OpCodes.Bgt_Un }, { OpCodes.Ble_S, OpCodes.Ble },
        { OpCodes.Ble_Un_S, OpCodes.Ble_Un }, { OpCodes.Blt_S, OpCodes.Blt },
        { OpCodes.Blt_Un_S, OpCodes.Blt_Un }, { OpCodes.Leave_S, OpCodes.Leave },
    };

    static readonly Dictionary<Code, OpCode> LongOf = new Dictionary<Code, OpCode>();
    static readonly Dictionary<Code, OpCode> ShortOf = new Dictionary<Code, OpCode>();

    static Branches()
    {
        for (int i = 0; i < Forms.GetLength(0); i++)
        {
            LongOf[Forms[i, 0].Code] = Forms[i, 1];
            ShortOf[Forms[i, 1].Code] = Forms[i, 0];
        }
    }

    public static void Widen(Collection<Instruction> code)
    {
        OpCode wide;
        foreach (var ins in code)
            if (LongOf.TryGetValue(ins.OpCode.Code, out wide))
                ins.OpCode = wide;
    }

    // A long branch whose displacement fits in a signed byte is made short, until none is left.
    // Each pass measures with the forms as they are; making a branch short only moves code
    // closer together, so a displacement found to fit keeps fitting.
    public static void Shorten(Collection<Instruction> code)
    {
        for (bool changed = true; changed;)
        {
            changed = false;
            int offset = 0;
            foreach (var ins in code)
            {
                ins.Offset = offset;
                offset += ins.GetSize();
            }
            OpCode narrow;
            foreach (var ins in code)
            {
                if (!ShortOf.TryGetValue(ins.OpCode.Code, out narrow))
                    continue;
                // Measured from the end of the long form: the short form's is the same for a
                // forward target and 3 bytes nearer zero for a backward one.
                int displacement = ((Instruction)ins.Operand).Offset - (ins.Offset + ins.GetSize());
                if (displacement >= sbyte.MinValue && displacement <= sbyte.MaxValue)
                {
                    ins.OpCode = narrow;
                    changed = true;
                }
            }
        }
    }
}
