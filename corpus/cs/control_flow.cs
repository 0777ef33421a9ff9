// control_flow.cs: exception handling and branch shapes for the runtime oracle.
// Deterministic: no time, randomness or environment in the output. Every line
// goes through Out(), which folds it into the checksum printed last.
using System;
using System.Collections.Generic;
using System.IO;
using System.Text;

class MyException : Exception
{
    public int Code;
    public MyException(int code) : base("my" + code) { Code = code; }
}

class Resource : IDisposable
{
    string name;
    public Resource(string name) { this.name = name; ControlFlow.Out("open " + name); }
    public void Dispose() { ControlFlow.Out("dispose " + name); }
}

static class ControlFlow
{
    static uint hash = 2166136261;
    static int lines;

    public static void Out(string s)
    {
        Console.WriteLine(s);
        foreach (char c in s) { hash ^= c; hash *= 16777619; }
        hash ^= 10; hash *= 16777619;
        lines++;
    }

    // ------------------------------------------------------------ exceptions

    static int Nested(int x)
    {
        int r = 0;
        try
        {
            try
            {
                try
                {
                    if (x == 0) throw new MyException(1);
                    if (x == 1) throw new InvalidOperationException();
                    if (x == 2) r = 10 / (x - 2);
                    r += 100;
                }
                catch (MyException e)
                {
                    Out("inner catch " + e.Code);
                    r += 1;
                    if (x == 0) throw new MyException(2);
                }
                finally
                {
                    Out("inner finally x=" + x);
                    r += 1000;
                }
            }
            catch (InvalidOperationException)
            {
                Out("middle catch IOE");
                r += 20;
            }
            finally
            {
                Out("middle finally");
                r += 10000;
            }
        }
        catch (MyException e)
        {
            Out("outer catch my " + e.Code);
            r += 300;
        }
        catch (DivideByZeroException)
        {
            Out("outer catch div");
            r += 400;
        }
        return r;
    }

    static bool Log(string what, bool result)
    {
        Out("filter " + what + " -> " + result);
        return result;
    }

    static int Filters(int code)
    {
        try
        {
            try
            {
                throw new MyException(code);
            }
            catch (MyException e) when (Log("even " + e.Code, e.Code % 2 == 0))
            {
                Out("handled even " + e.Code);
                return 2;
            }
            catch (MyException e) when (Log("div3 " + e.Code, e.Code % 3 == 0))
            {
                Out("handled div3 " + e.Code);
                return 3;
            }
            finally
            {
                Out("filters finally " + code);
            }
        }
        catch (Exception e) when (Log("any " + e.GetType().Name, true))
        {
            Out("handled other");
            return 1;
        }
    }

    static int ReturnFromTry(int x)
    {
        int r = 5;
        try
        {
            if (x > 0) return r + x;
            r = -1;
        }
        finally
        {
            r = 99;  // does not change the value already being returned
            Out("finally after return, r=" + r);
        }
        return r;
    }

    static string UsingAndLock(int n)
    {
        object gate = new object();
        var sb = new StringBuilder();
        using (var a = new Resource("a" + n))
        using (var b = new Resource("b" + n))
        {
            lock (gate)
            {
                for (int i = 0; i < n; i++) sb.Append(i);
                if (n == 3) return "early " + sb;
            }
        }
        try
        {
            using (new Resource("c" + n))
            {
                throw new MyException(n);
            }
        }
        catch (MyException e)
        {
            sb.Append("!" + e.Code);
        }
        return sb.ToString();
    }

    static int Checked(int a, int b)
    {
        try
        {
            return checked(a * b);
        }
        catch (OverflowException)
        {
            Out("overflow " + a + "*" + b);
            return unchecked(a * b);
        }
    }

    static long CheckedConversions(long v)
    {
        long acc = 0;
        try { acc += checked((int)v); } catch (OverflowException) { acc += 1; }
        try { acc += checked((byte)v); } catch (OverflowException) { acc += 2; }
        try { acc += checked((ushort)(v - 1)); } catch (OverflowException) { acc += 4; }
        try { acc += (long)checked((ulong)v); } catch (OverflowException) { acc += 8; }
        return acc;
    }

    static void Rethrow(int depth)
    {
        try
        {
            if (depth == 0) throw new MyException(77);
            Rethrow(depth - 1);
        }
        catch (MyException e)
        {
            Out("rethrow at depth " + depth + " code " + e.Code);
            e.Code++;
            throw;
        }
    }

    // ------------------------------------------------------------ switches

    static string Dense(int x)
    {
        switch (x)
        {
            case 0: return "zero";
            case 1: return "one";
            case 2: return "two";
            case 3: return "three";
            case 4: return "four";
            case 5: return "five";
            case 6: return "six";
            case 7: return "seven";
            case 8: return "eight";
            case 10: return "ten";
            case 100: return "hundred";
            case -1: return "minus one";
            default: return "many(" + x + ")";
        }
    }

    static int StringSwitch(string s)
    {
        switch (s)
        {
            case "alpha": return 1;
            case "beta": return 2;
            case "gamma": return 3;
            case "delta": return 4;
            case "epsilon": return 5;
            case "zeta": return 6;
            case "eta": return 7;
            case "theta": return 8;
            case "iota": return 9;
            case null: return -2;
            case "": return -3;
            default: return -1;
        }
    }

    static int SmallStringSwitch(string s)
    {
        switch (s)
        {
            case "x": return 1;
            case "y": return 2;
            default: return 0;
        }
    }

    // ------------------------------------------------------------ loops, goto

    // Loop bodies longer than 127 bytes of IL so that the back edges and the
    // exits need long branch forms.
    static long LongLoop(int n)
    {
        long a = 1, b = 2, c = 3, d = 4;
        for (int i = 0; i < n; i++)
        {
            a = a * 31 + i; b ^= a << 3; c += b >> 2; d -= c * 7;
            a = a * 17 + b; b ^= c << 5; c += d >> 1; d -= a * 3;
            a = a * 13 + c; b ^= d << 7; c += a >> 3; d -= b * 5;
            a = a * 11 + d; b ^= a << 2; c += b >> 4; d -= c * 9;
            a = a * 7 + i;  b ^= b << 1; c += c >> 5; d -= d * 11;
            if ((a & 0xFF) == 0x17) { Out("rare hit at " + i); continue; }
            if (d == 42) break;
            a &= 0xFFFFFFFFFFFL; b &= 0xFFFFFFFFFFFL; c &= 0xFFFFFFFFFFFL; d &= 0xFFFFFFFFFFFL;
        }
        return a ^ b ^ c ^ d;
    }

    static int WhileDo(int n)
    {
        int steps = 0;
        while (n != 1)
        {
            n = (n % 2 == 0) ? n / 2 : 3 * n + 1;
            steps++;
        }
        int k = 0;
        do { k += steps; steps--; } while (steps > 0);
        return k;
    }

    static int Goto(int n)
    {
        int i = 0, acc = 0;
    top:
        if (i >= n) goto done;
        acc += i * i;
        i++;
        if (acc > 1000) goto overflow;
        goto top;
    overflow:
        Out("goto overflow at i=" + i);
        acc = -acc;
    done:
        return acc;
    }

    static int Nested2D(int n)
    {
        int count = 0;
        for (int i = 0; i < n; i++)
        {
            for (int j = 0; j < n; j++)
            {
                if (j > i) break;
                if ((i + j) % 3 == 0) continue;
                count += i * j;
            }
        }
        return count;
    }

    static int Recursion(int n)
    {
        return n <= 1 ? n : Recursion(n - 1) + Recursion(n - 2);
    }

    static int Ackermann(int m, int n)
    {
        if (m == 0) return n + 1;
        if (n == 0) return Ackermann(m - 1, 1);
        return Ackermann(m - 1, Ackermann(m, n - 1));
    }

    static string Conditional(int a, int b)
    {
        string s = a > b ? "gt" : a < b ? "lt" : "eq";
        bool both = a > 0 && b > 0;
        bool either = a > 0 || b > 0;
        return s + (both ? "+both" : "") + (either ? "+either" : "") + (a == b ? "" : "!");
    }

    static void Main()
    {
        System.Threading.Thread.CurrentThread.CurrentCulture = System.Globalization.CultureInfo.InvariantCulture;
        for (int x = 0; x < 4; x++) Out("Nested(" + x + ") = " + Nested(x));
        foreach (int c in new[] { 2, 3, 5, 6 }) Out("Filters(" + c + ") = " + Filters(c));
        Out("ReturnFromTry(3) = " + ReturnFromTry(3));
        Out("ReturnFromTry(0) = " + ReturnFromTry(0));
        for (int n = 2; n <= 4; n++) Out("UsingAndLock(" + n + ") = " + UsingAndLock(n));
        Out("Checked = " + Checked(1000, 1000));
        Out("Checked = " + Checked(100000, 100000));
        foreach (long v in new long[] { 5, 300, 0, -1, 70000, 5000000000 })
            Out("CheckedConversions(" + v + ") = " + CheckedConversions(v));
        try { Rethrow(3); }
        catch (MyException e) { Out("Rethrow final code " + e.Code); }

        for (int i = -2; i <= 12; i++) Out("Dense(" + i + ") = " + Dense(i));
        Out("Dense(100) = " + Dense(100));
        foreach (var s in new[] { "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa", "", null })
            Out("StringSwitch(" + (s ?? "null") + ") = " + StringSwitch(s));
        Out("SmallStringSwitch = " + SmallStringSwitch("x") + SmallStringSwitch("y") + SmallStringSwitch("z"));

        Out("LongLoop(1000) = " + LongLoop(1000));
        Out("WhileDo(27) = " + WhileDo(27));
        Out("Goto(10) = " + Goto(10));
        Out("Goto(30) = " + Goto(30));
        Out("Nested2D(20) = " + Nested2D(20));
        Out("Recursion(20) = " + Recursion(20));
        Out("Ackermann(2,3) = " + Ackermann(2, 3));
        foreach (var p in new[] { new[] { 1, 2 }, new[] { 2, 1 }, new[] { 0, 0 }, new[] { -1, 5 } })
            Out("Conditional(" + p[0] + "," + p[1] + ") = " + Conditional(p[0], p[1]));

        Console.WriteLine("lines: " + lines);
        Console.WriteLine("checksum: " + hash.ToString("x8"));
    }
}
