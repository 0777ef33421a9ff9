// Calls every public static int32(int32) method of an assembly's public types (by type and
// method name, ordinal order) with a fixed list of arguments and prints one line per call: the
// result, or the type of the exception it threw. The runner of corpus/il/weaver_triggers.il,
// so that a method a rewriter broke shows as one line, not as the end of the program. With
// METHOD, only the methods of that name are called.
//
//   mono run_triggers.exe ASSEMBLY [METHOD]
using System;
using System.Globalization;
using System.Linq;
using System.Reflection;

static class RunTriggers
{
    static readonly int[] Arguments = { -3, 0, 1, 2, 5, 40 };

    static int Main(string[] args)
    {
        if (args.Length < 1 || args.Length > 2)
        {
            Console.Error.WriteLine("usage: run_triggers.exe ASSEMBLY [METHOD]");
            return 2;
        }
        string only = args.Length == 2 ? args[1] : null;
        var assembly = Assembly.LoadFrom(args[0]);
        var types = assembly.GetExportedTypes().OrderBy(t => t.FullName, StringComparer.Ordinal);
        foreach (var type in types)
        {
            var methods = type.GetMethods(BindingFlags.Public | BindingFlags.Static | BindingFlags.DeclaredOnly)
                .Where(m => m.ReturnType == typeof(int) && m.GetParameters().Length == 1
                    && m.GetParameters()[0].ParameterType == typeof(int)
                    && (only == null || m.Name == only))
                .OrderBy(m => m.Name, StringComparer.Ordinal);
            foreach (var method in methods)
            {
                foreach (int x in Arguments)
                {
                    string result;
                    try
                    {
                        result = ((int)method.Invoke(null, new object[] { x })).ToString(CultureInfo.InvariantCulture);
                    }
                    catch (Exception e)
                    {
                        while (e is TargetInvocationException && e.InnerException != null)
                            e = e.InnerException;
                        result = "threw " + e.GetType().FullName;
                    }
                    Console.WriteLine(type.FullName + "::" + method.Name + "(" + x.ToString(CultureInfo.InvariantCulture) + ") = " + result);
                }
            }
        }
        return 0;
    }
}
