// unsafe_numeric.cs: pointer, stackalloc, fixed and numeric shapes for the
// runtime oracle (compile with -unsafe). Deterministic output; the last line
// is a checksum of every line printed before it.
using System;
using System.Globalization;
using System.Runtime.InteropServices;
using System.Threading;

[StructLayout(LayoutKind.Sequential)]
struct Header
{
    public byte Kind;
    public short Flags;
    public int Length;
    public long Stamp;
}

unsafe struct FixedBuf
{
    public fixed int Data[8];
    public int Count;
}

static unsafe class UnsafeNumeric
{
    static uint hash = 2166136261;
    static int lines;

    static void Out(string s)
    {
        Console.WriteLine(s);
        foreach (char c in s) { hash ^= c; hash *= 16777619; }
        hash ^= 10; hash *= 16777619;
        lines++;
    }

    static int StackallocSum(int n)
    {
        int* buf = stackalloc int[n];
        for (int i = 0; i < n; i++) buf[i] = i * i - 3 * i;
        int s = 0;
        for (int* p = buf; p < buf + n; p++) s += *p;
        return s;
    }

    static string StackallocBytes(int n)
    {
        byte* b = stackalloc byte[n];
        for (int i = 0; i < n; i++) b[i] = (byte)(i * 37 + 11);
        // Reverse in place via two pointers.
        byte* lo = b, hi = b + n - 1;
        while (lo < hi) { byte t = *lo; *lo = *hi; *hi = t; lo++; hi--; }
        var chars = new char[n * 2];
        const string hex = "0123456789abcdef";
        for (int i = 0; i < n; i++) { chars[2 * i] = hex[b[i] >> 4]; chars[2 * i + 1] = hex[b[i] & 15]; }
        return new string(chars);
    }

    static long FixedArraySum(int[] arr)
    {
        long s = 0;
        fixed (int* p = arr)
        {
            int* q = p;
            for (int i = 0; i < arr.Length; i++) s += *q++ * (long)(i + 1);
        }
        return s;
    }

    static int FixedString(string s)
    {
        int h = 0;
        fixed (char* p = s)
        {
            for (char* c = p; *c != '\0'; c++) h = h * 31 + *c;
        }
        return h;
    }

    static string FixedBuffer()
    {
        FixedBuf fb;
        fb.Count = 0;
        for (int i = 0; i < 8; i++) { fb.Data[i] = 1 << i; fb.Count++; }
        int s = 0;
        for (int i = 0; i < fb.Count; i++) s += fb.Data[i];
        return "fixed buffer sum " + s + " count " + fb.Count;
    }

    static string StructPointers()
    {
        Header h = new Header();
        Header* ph = &h;
        ph->Kind = 7;
        ph->Flags = -2;
        (*ph).Length = 1234;
        ph->Stamp = 0x0102030405060708L;
        byte* raw = (byte*)ph;
        long off = (byte*)&ph->Stamp - raw;
        return "header kind=" + h.Kind + " flags=" + h.Flags + " len=" + h.Length
            + " stamp=" + h.Stamp.ToString("x") + " sizeof=" + sizeof(Header) + " stampOffset=" + off;
    }

    static string Reinterpret()
    {
        float f = 1.5f;
        int bits = *(int*)&f;
        double d = -0.1;
        long dbits = *(long*)&d;
        long nanBits = 0x7FF8000000000123L;
        double nan = *(double*)&nanBits;
        return "bits(1.5f)=" + bits.ToString("x8") + " bits(-0.1)=" + dbits.ToString("x16")
            + " nan? " + double.IsNaN(nan) + " roundtrip=" + (*(long*)&nan).ToString("x16");
    }

    static string Checked()
    {
        var sb = new System.Text.StringBuilder();
        int[] xs = { int.MaxValue, int.MinValue, 0, 46341, -46341 };
        foreach (int x in xs)
        {
            try { sb.Append(checked(x + 1)).Append(' '); } catch (OverflowException) { sb.Append("ovf+ "); }
            try { sb.Append(checked(x * x)).Append(' '); } catch (OverflowException) { sb.Append("ovf* "); }
            try { sb.Append(checked(-x)).Append(' '); } catch (OverflowException) { sb.Append("ovf- "); }
            try { sb.Append(checked((uint)x)).Append(' '); } catch (OverflowException) { sb.Append("ovfu "); }
            sb.Append(unchecked(x * 3)).Append(" | ");
        }
        return sb.ToString();
    }

    static string Division()
    {
        var sb = new System.Text.StringBuilder();
        int[] ns = { 7, -7, int.MinValue };
        int[] ds = { 2, -2, 0, -1 };
        foreach (int n in ns)
            foreach (int d in ds)
            {
                try { sb.Append(n / d).Append('r').Append(n % d).Append(' '); }
                catch (DivideByZeroException) { sb.Append("div0 "); }
                catch (OverflowException) { sb.Append("ovf "); }
                catch (ArithmeticException e) { sb.Append(e.GetType().Name).Append(' '); }
            }
        uint un = 0xFFFFFFF0u;
        sb.Append(un / 3u).Append(' ').Append(un % 7u).Append(' ').Append((ulong)un >> 3);
        return sb.ToString();
    }

    static string Floats()
    {
        var sb = new System.Text.StringBuilder();
        double[] ds = { 0.1 + 0.2, 1.0 / 3.0, -0.0, double.Epsilon, 1e308 * 10, Math.Sqrt(2), (double)(float)0.1 };
        foreach (double d in ds) sb.Append(d.ToString("R")).Append(' ');
        sb.Append((int)3.99).Append(' ').Append((int)-3.99).Append(' ').Append((long)1e18).Append(' ');
        sb.Append(Math.Round(2.5)).Append(' ').Append(Math.Round(3.5)).Append(' ').Append(Math.Floor(-1.5));
        try { double x = double.NaN; sb.Append(checked((int)x)); } catch (OverflowException) { sb.Append(" nan->ovf"); }
        return sb.ToString();
    }

    static string Bits(ulong x)
    {
        int pop = 0;
        for (ulong y = x; y != 0; y &= y - 1) pop++;
        int lz = 0;
        for (ulong m = 1UL << 63; m != 0 && (x & m) == 0; m >>= 1) lz++;
        ulong rot = (x << 13) | (x >> 51);
        return "x=" + x.ToString("x") + " pop=" + pop + " lz=" + lz + " rot=" + rot.ToString("x")
            + " sar=" + ((long)x >> 7).ToString("x") + " shr=" + (x >> 7).ToString("x");
    }

    static long Crc(byte[] data)
    {
        uint crc = 0xFFFFFFFF;
        fixed (byte* p = data)
        {
            for (int i = 0; i < data.Length; i++)
            {
                crc ^= p[i];
                for (int k = 0; k < 8; k++)
                    crc = (crc & 1) != 0 ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
            }
        }
        return ~crc;
    }

    static void Main()
    {
        Thread.CurrentThread.CurrentCulture = CultureInfo.InvariantCulture;
        for (int n = 1; n <= 64; n *= 4) Out("StackallocSum(" + n + ") = " + StackallocSum(n));
        Out("StackallocBytes(12) = " + StackallocBytes(12));
        Out("FixedArraySum = " + FixedArraySum(new[] { 5, -3, 8, 13, 21, -34 }));
        Out("FixedString = " + FixedString("ilcheck corpus"));
        Out(FixedBuffer());
        Out(StructPointers());
        Out(Reinterpret());
        Out("checked: " + Checked());
        Out("division: " + Division());
        Out("floats: " + Floats());
        foreach (ulong x in new ulong[] { 0, 1, 0x8000000000000000UL, 0xDEADBEEFCAFEBABEUL, 0x00FF00FF00FF00FFUL })
            Out(Bits(x));
        var data = new byte[256];
        for (int i = 0; i < data.Length; i++) data[i] = (byte)i;
        Out("crc32 = " + Crc(data).ToString("x8"));
        Out("crc32(empty) = " + Crc(new byte[0]).ToString("x8"));

        Console.WriteLine("lines: " + lines);
        Console.WriteLine("checksum: " + hash.ToString("x8"));
    }
}
