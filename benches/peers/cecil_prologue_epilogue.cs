// The `prologue-epilogue` workload with Mono.Cecil, for a side-by-side figure: every method of
// every assembly gets a `nop` at entry and has every `ret` redirected to one shared `nop; ret`
// epilogue (the last `ret` itself when the code ends with one, as ilcheck does); branches are
// made long before the edit and short again where they fit after it, to a fixpoint (what
// Mono.Cecil.Rocks' SimplifyMacros/OptimizeMacros do for branches: Cecil itself wraps a short
// displacement that overflows; Rocks is not shipped with mono's Cecil 0.11, so the two passes
// are written here, branches only); each module is written to memory in full. Cecil neither
// verifies the result nor keeps bodies as they were.
//
//   mono cecil_prologue_epilogue.exe DIR ROUNDS THREADS [file|memory] [OUT_DIR]
//
// Prints every round's wall time and the best, the number of methods rewritten and the bytes
// written, and each assembly Cecil failed on with its exception.
using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Threading;
using Mono.Cecil;
using Mono.Cecil.Cil;
using Mono.Collections.Generic;

static class CecilPrologueEpilogue
{
    static bool CompletesTailCall(Collection<Instruction> code, int i)
    {
        return i >= 2 && code[i - 2].OpCode.Code == Code.Tail;
    }

    static readonly Dictionary<Code, OpCode> Long = new Dictionary<Code, OpCode>
    {
        { Code.Br_S, OpCodes.Br }, { Code.Brfalse_S, OpCodes.Brfalse }, { Code.Brtrue_S, OpCodes.Brtrue },
        { Code.Beq_S, OpCodes.Beq }, { Code.Bge_S, OpCodes.Bge }, { Code.Bgt_S, OpCodes.Bgt },
        { Code.Ble_S, OpCodes.Ble }, { Code.Blt_S, OpCodes.Blt }, { Code.Bne_Un_S, OpCodes.Bne_Un },
        { Code.Bge_Un_S, OpCodes.Bge_Un }, { Code.Bgt_Un_S, OpCodes.Bgt_Un }, { Code.Ble_Un_S, OpCodes.Ble_Un },
        { Code.Blt_Un_S, OpCodes.Blt_Un }, { Code.Leave_S, OpCodes.Leave },
    };
    static readonly Dictionary<Code, OpCode> Short = Long.ToDictionary(kv => kv.Value.Code, kv => OpCodes.Nop);

    static CecilPrologueEpilogue()
    {
        foreach (var kv in Long)
            Short[kv.Value.Code] = typeof(OpCodes).GetFields().Select(f => (OpCode)f.GetValue(null)).First(o => o.Code == kv.Key);
    }

    static void LongBranches(Collection<Instruction> code)
    {
        OpCode op;
        foreach (var ins in code)
            if (Long.TryGetValue(ins.OpCode.Code, out op))
                ins.OpCode = op;
    }

    // Short where the displacement fits, repeated until nothing changes: shortening only
    // brings targets closer, so every pass keeps the earlier choices valid.
    static void ShortBranches(Collection<Instruction> code)
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
            OpCode op;
            foreach (var ins in code)
            {
                if (!Short.TryGetValue(ins.OpCode.Code, out op))
                    continue;
                int disp = ((Instruction)ins.Operand).Offset - (ins.Offset + 5);
                if (disp >= -128 && disp <= 127)
                {
                    ins.OpCode = op;
                    changed = true;
                }
            }
        }
    }

    static void Rewrite(MethodBody body)
    {
        var code = body.Instructions;
        if (code.Count == 0)
            return;
        LongBranches(code);
        var il = body.GetILProcessor();
        int last = -1;
        for (int i = code.Count - 1; i >= 0; i--)
            if (code[i].OpCode.Code == Code.Ret && !CompletesTailCall(code, i)) { last = i; break; }
        var first = code[0];
        if (last >= 0)
        {
            Instruction entry;
            if (last == code.Count - 1)
            {
                // Branches to the final `ret` keep its instruction object, now the epilogue's nop.
                entry = code[last];
                entry.OpCode = OpCodes.Nop;
                il.Append(il.Create(OpCodes.Ret));
            }
            else
            {
                entry = il.Create(OpCodes.Nop);
                // A handler that runs to the end of the code must not take in the epilogue.
                foreach (var h in body.ExceptionHandlers)
                    if (h.HandlerEnd == null)
                        h.HandlerEnd = entry;
                il.Append(entry);
                il.Append(il.Create(OpCodes.Ret));
            }
            for (int i = 0; i < code.Count - 2; i++)
            {
                var ins = code[i];
                if (ins != entry && ins.OpCode.Code == Code.Ret && !CompletesTailCall(code, i))
                {
                    ins.OpCode = OpCodes.Br;
                    ins.Operand = entry;
                }
            }
        }
        il.InsertBefore(first, il.Create(OpCodes.Nop));
        ShortBranches(code);
    }

    static void Main(string[] args)
    {
        string dir = args.Length > 0 ? args[0] : "/usr/lib/mono/4.5";
        int rounds = args.Length > 1 ? int.Parse(args[1]) : 3;
        int threads = args.Length > 2 ? int.Parse(args[2]) : 1;
        // `memory`: each file read into memory first (ReaderParameters.InMemory).
        bool inMemory = args.Length > 3 && args[3] == "memory";
        // Where the last round's output goes, one file per assembly, for checking it.
        string outDir = args.Length > 4 ? args[4] : null;
        // Largest first, so that no big assembly is left for the end.
        var files = Directory.GetFiles(dir, "*.dll").OrderByDescending(f => new FileInfo(f).Length).ToArray();
        double best = double.MaxValue;
        for (int r = 0; r < rounds; r++)
        {
            long methods = 0, written = 0, failed = 0;
            int next = -1;
            var errors = new List<string>();
            var sw = Stopwatch.StartNew();
            ThreadStart work = () =>
            {
                long m = 0, w = 0, f = 0;
                for (int k; (k = Interlocked.Increment(ref next)) < files.Length;)
                {
                    try
                    {
                        using (var module = ModuleDefinition.ReadModule(files[k], new ReaderParameters { InMemory = inMemory }))
                        {
                            foreach (var type in module.GetTypes())
                                foreach (var method in type.Methods)
                                    if (method.HasBody)
                                    {
                                        Rewrite(method.Body);
                                        m++;
                                    }
                            var outp = new MemoryStream();
                            module.Write(outp);
                            w += outp.Length;
                            if (outDir != null && r == rounds - 1)
                                File.WriteAllBytes(Path.Combine(outDir, Path.GetFileName(files[k])), outp.ToArray());
                        }
                    }
                    catch (Exception e)
                    {
                        f++;
                        lock (errors) errors.Add(Path.GetFileName(files[k]) + ": " + e.GetType().Name + ": " + e.Message);
                    }
                }
                Interlocked.Add(ref methods, m);
                Interlocked.Add(ref written, w);
                Interlocked.Add(ref failed, f);
            };
            var others = Enumerable.Range(1, threads - 1).Select(_ => new Thread(work)).ToList();
            others.ForEach(t => t.Start());
            work();
            others.ForEach(t => t.Join());
            double secs = sw.Elapsed.TotalSeconds;
            best = Math.Min(best, secs);
            Console.WriteLine("round {0}: {1} assemblies, {2} methods rewritten, {3} bytes written, {4} failed; {5} thread(s): wall {6:F3}s",
                r + 1, files.Length - failed, methods, written, failed, threads, secs);
            foreach (var e in errors)
                Console.WriteLine("  failed: " + e);
        }
        Console.WriteLine("best of {0}: wall {1:F3}s", rounds, best);
    }
}
