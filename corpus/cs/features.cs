// features.cs: compiler-generated shapes for the runtime oracle: iterators,
// async state machines (run synchronously), closures, generics, structs,
// virtual/interface dispatch, delegates, events, properties, static
// constructors, params, ref/out, nullable, LINQ. Deterministic output; the
// last line is a checksum of every line printed before it.
using System;
using System.Collections.Generic;
using System.Linq;
using System.Text;
using System.Threading.Tasks;

interface IShape
{
    string Name { get; }
    double Area();
}

abstract class Shape : IShape
{
    static int created;
    public static int Created { get { return created; } }
    protected Shape() { created++; }
    public abstract string Name { get; }
    public abstract double Area();
    public virtual string Describe() { return Name + " area " + Area().ToString("F3", System.Globalization.CultureInfo.InvariantCulture); }
}

class Circle : Shape
{
    double r;
    public Circle(double r) { this.r = r; }
    public override string Name { get { return "circle"; } }
    public override double Area() { return Math.PI * r * r; }
}

class Rect : Shape
{
    public double W { get; private set; }
    public double H { get; set; }
    public Rect(double w, double h) { W = w; H = h; }
    public override string Name { get { return "rect"; } }
    public override double Area() { return W * H; }
    public override string Describe() { return "[" + base.Describe() + "]"; }
}

sealed class Square : Rect
{
    public Square(double s) : base(s, s) { }
    public override string Name { get { return "square"; } }
}

struct Vec
{
    public int X, Y;
    public Vec(int x, int y) { X = x; Y = y; }
    public static Vec operator +(Vec a, Vec b) { return new Vec(a.X + b.X, a.Y + b.Y); }
    public int Dot(Vec o) { return X * o.X + Y * o.Y; }
    public void Scale(int k) { X *= k; Y *= k; }
    public override string ToString() { return "(" + X + "," + Y + ")"; }
}

class Registry
{
    public static readonly List<string> Log;
    static Registry()
    {
        Log = new List<string>();
        Log.Add("Registry cctor");
    }
    public static int Count { get { return Log.Count; } }
}

class Counter
{
    public event EventHandler<int> Changed;
    public event Action Reset;
    int value;
    public int Value
    {
        get { return value; }
        set
        {
            if (this.value == value) return;
            this.value = value;
            var h = Changed;
            if (h != null) h(this, value);
        }
    }
    public void Clear() { Value = 0; if (Reset != null) Reset(); }
}

class Stack<T> where T : IComparable<T>
{
    T[] items = new T[2];
    int n;
    public void Push(T x)
    {
        if (n == items.Length) Array.Resize(ref items, n * 2);
        items[n++] = x;
    }
    public T Pop() { return items[--n]; }
    public int Count { get { return n; } }
    public T Max()
    {
        T m = items[0];
        for (int i = 1; i < n; i++) if (items[i].CompareTo(m) > 0) m = items[i];
        return m;
    }
}

class Pair<TA, TB>
{
    public TA A; public TB B;
    public Pair(TA a, TB b) { A = a; B = b; }
    public Pair<TB, TA> Swap() { return new Pair<TB, TA>(B, A); }
    public override string ToString() { return "<" + A + "," + B + ">"; }
}

static class Features
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

    static string F(double d) { return d.ToString("F4", System.Globalization.CultureInfo.InvariantCulture); }

    // ------------------------------------------------------------ iterators

    static IEnumerable<int> Fib(int n)
    {
        int a = 0, b = 1;
        for (int i = 0; i < n; i++)
        {
            yield return a;
            int t = a + b; a = b; b = t;
        }
    }

    static IEnumerable<string> WithFinally(int n)
    {
        try
        {
            for (int i = 0; i < n; i++)
            {
                if (i == 3) yield break;
                yield return "item" + i;
            }
        }
        finally
        {
            Out("iterator finally n=" + n);
        }
    }

    static IEnumerable<T> Interleave<T>(IEnumerable<T> a, IEnumerable<T> b)
    {
        using (var ea = a.GetEnumerator())
        using (var eb = b.GetEnumerator())
        {
            bool ma = ea.MoveNext(), mb = eb.MoveNext();
            while (ma || mb)
            {
                if (ma) { yield return ea.Current; ma = ea.MoveNext(); }
                if (mb) { yield return eb.Current; mb = eb.MoveNext(); }
            }
        }
    }

    // ------------------------------------------------------------ async

    static async Task<int> AddAsync(int a, int b)
    {
        await Task.Yield();
        return a + b;
    }

    static async Task<int> SumAsync(int n)
    {
        int s = 0;
        for (int i = 0; i < n; i++)
        {
            s = await AddAsync(s, i);
            if (i % 4 == 0) Out("async step " + i + " s=" + s);
        }
        return s;
    }

    static async Task<string> AsyncWithTry(int x)
    {
        try
        {
            await Task.Yield();
            if (x < 0) throw new ArgumentException("neg");
            return "ok " + await AddAsync(x, 1);
        }
        catch (ArgumentException e)
        {
            return "caught " + e.Message;
        }
        finally
        {
            Out("async finally " + x);
        }
    }

    // ------------------------------------------------------------ closures

    static List<Func<int>> MakeClosures()
    {
        var list = new List<Func<int>>();
        int shared = 10;
        for (int i = 0; i < 5; i++)
        {
            int copy = i;
            list.Add(() => copy * shared);
        }
        shared = 100;  // all closures see the update
        return list;
    }

    static Func<int, int> Compose(Func<int, int> f, Func<int, int> g) { return x => g(f(x)); }

    static Func<int> MakeCounter()
    {
        int c = 0;
        return () => ++c;
    }

    // ------------------------------------------------------------ generics

    static T MaxOf<T>(params T[] xs) where T : IComparable<T>
    {
        T m = xs[0];
        foreach (var x in xs) if (x.CompareTo(m) > 0) m = x;
        return m;
    }

    static void Swap<T>(ref T a, ref T b) { T t = a; a = b; b = t; }

    static T Make<T>() where T : new() { return new T(); }

    static string TypeName<T>(T x) where T : class { return x == null ? "null" : x.GetType().Name; }

    // ------------------------------------------------------------ ref / out / params

    static bool TryDivide(int a, int b, out int q, out int r)
    {
        if (b == 0) { q = r = 0; return false; }
        q = a / b; r = a % b;
        return true;
    }

    static void Bump(ref int x, int by = 1) { x += by; }

    static int Sum(params int[] xs) { int s = 0; foreach (var x in xs) s += x; return s; }

    static string Join(string sep, params object[] parts)
    {
        var sb = new StringBuilder();
        for (int i = 0; i < parts.Length; i++) { if (i > 0) sb.Append(sep); sb.Append(parts[i] ?? "null"); }
        return sb.ToString();
    }

    // ------------------------------------------------------------ nullable

    static string NullableOps(int? a, int? b)
    {
        int? sum = a + b;
        bool? gt = a > b;
        return "sum=" + (sum.HasValue ? sum.Value.ToString() : "null")
            + " gt=" + (a.HasValue && b.HasValue ? gt.ToString() : "n/a")
            + " coalesce=" + (a ?? b ?? -1)
            + " getvalueordefault=" + b.GetValueOrDefault(7);
    }

    static void Main()
    {
        System.Threading.Thread.CurrentThread.CurrentCulture = System.Globalization.CultureInfo.InvariantCulture;
        Out("fib: " + string.Join(",", Fib(15).Select(x => x.ToString()).ToArray()));
        foreach (var s in WithFinally(10)) Out(s);
        foreach (var s in WithFinally(2)) Out(s);
        var first = WithFinally(10).First();
        Out("first = " + first);
        Out("interleave: " + string.Join(" ", Interleave(new[] { "a", "b", "c" }, new[] { "1", "2" }).ToArray()));

        Out("SumAsync(10) = " + SumAsync(10).GetAwaiter().GetResult());
        Out(AsyncWithTry(5).GetAwaiter().GetResult());
        Out(AsyncWithTry(-5).GetAwaiter().GetResult());
        Out("Task.Run = " + Task.Run(() => SumAsync(3)).Result);

        foreach (var f in MakeClosures()) Out("closure " + f());
        var inc2 = Compose(x => x + 1, x => x * 2);
        Out("compose(5) = " + inc2(5));
        var counter = MakeCounter();
        counter(); counter();
        Out("counter = " + counter());

        var shapes = new List<Shape> { new Circle(1), new Rect(2, 3), new Square(4), new Circle(0.5) };
        foreach (var sh in shapes) Out(sh.Describe());
        IShape ish = shapes[2];
        Out("interface name " + ish.Name + " area " + F(ish.Area()));
        Out("shapes created " + Shape.Created);
        Out("total area " + F(shapes.Sum(x => x.Area())));

        var v = new Vec(1, 2);
        var w = v;
        w.Scale(3);
        Out("struct copy v=" + v + " w=" + w + " sum=" + (v + w) + " dot=" + v.Dot(w));
        var vs = new Vec[3];
        vs[1].X = 5;
        vs[1].Scale(2);
        Out("struct array " + vs[0] + vs[1] + vs[2]);

        Out("static ctor: " + Registry.Count + " " + Registry.Log[0]);

        var c = new Counter();
        int changes = 0;
        EventHandler<int> onChanged = (sender, val) => { changes++; Out("changed to " + val); };
        c.Changed += onChanged;
        c.Reset += () => Out("reset");
        c.Value = 3; c.Value = 3; c.Value = 4;
        c.Clear();
        c.Changed -= onChanged;
        c.Value = 9;
        Out("changes = " + changes + " value = " + c.Value);

        var st = new Stack<string>();
        foreach (var s in new[] { "pear", "apple", "zucchini", "fig" }) st.Push(s);
        Out("stack max " + st.Max() + " count " + st.Count + " pop " + st.Pop());
        var p = new Pair<int, string>(1, "one");
        Out("pair " + p + " swapped " + p.Swap());
        Out("MaxOf = " + MaxOf(3, 9, 2) + " " + MaxOf("b", "a", "c") + " " + F(MaxOf(1.5, -2.0)));
        int a1 = 1, b1 = 2;
        Swap(ref a1, ref b1);
        Out("swap " + a1 + " " + b1);
        Out("make " + Make<List<int>>().Count + " " + TypeName("s") + " " + TypeName<object>(null));

        int q, r;
        Out("TryDivide " + TryDivide(17, 5, out q, out r) + " " + q + " " + r);
        Out("TryDivide " + TryDivide(1, 0, out q, out r) + " " + q + " " + r);
        int bump = 10;
        Bump(ref bump); Bump(ref bump, 5);
        Out("bump " + bump);
        Out("Sum " + Sum() + " " + Sum(1) + " " + Sum(1, 2, 3, 4));
        Out("Join " + Join("-", 1, "x", null, 2.5));

        Out(NullableOps(1, 2));
        Out(NullableOps(null, 2));
        Out(NullableOps(3, null));

        Func<int, int> sq = x => x * x;
        Action<string> say = s => Out("say " + s);
        say("hi");
        Converter<int, string> conv = x => "#" + x;
        Predicate<int> even = x => x % 2 == 0;
        Out("delegates " + sq(7) + " " + conv(3) + " " + even(4) + " " + Array.FindAll(Enumerable.Range(0, 10).ToArray(), even).Length);
        Func<int, int> multi = sq;
        multi += x => x + 1000;
        Out("multicast last result " + multi(3) + " invocations " + multi.GetInvocationList().Length);

        var words = new[] { "delta", "alpha", "charlie", "bravo", "echo", "alpha", "foxtrot", "golf" };
        var grouped = words.GroupBy(x => x.Length).OrderBy(g => g.Key)
            .Select(g => g.Key + ":" + string.Join("/", g.OrderBy(x => x).ToArray()));
        foreach (var g in grouped) Out("group " + g);
        var q2 = from x in Enumerable.Range(1, 30)
                 where x % 3 == 0
                 let y = x * x
                 orderby y descending
                 select y;
        Out("linq " + string.Join(",", q2.Take(5).Select(x => x.ToString()).ToArray()));
        Out("distinct " + words.Distinct().Count() + " any " + words.Any(x => x.StartsWith("g")) + " all " + words.All(x => x.Length > 3));
        Out("aggregate " + Enumerable.Range(1, 10).Aggregate(1L, (acc, x) => acc * x));
        var dict = words.Distinct().ToDictionary(x => x, x => x.Length);
        Out("dict " + string.Join(",", dict.Keys.OrderBy(x => x).Select(k => k + "=" + dict[k]).ToArray()));
        var zipped = Enumerable.Range(0, 3).Zip(words, (i, s2) => i + s2);
        Out("zip " + string.Join(" ", zipped.ToArray()));

        Console.WriteLine("lines: " + lines);
        Console.WriteLine("checksum: " + hash.ToString("x8"));
    }
}
