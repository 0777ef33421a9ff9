// The probe assembly the tests call from rewritten programs: every call prints one line on
// standard error, so a program's standard output stays its own.
namespace Acme
{
    public class Probe
    {
        public static void Enter(string method, int token)
        {
            System.Console.Error.WriteLine("enter " + method + " " + token.ToString("x8"));
        }

        public static void EnterArgs(string method, object[] args)
        {
            var parts = new string[args.Length];
            for (int i = 0; i < args.Length; i++)
                parts[i] = Show(args[i]);
            System.Console.Error.WriteLine("enter " + method + " (" + string.Join(", ", parts) + ")");
        }

        public static void ExitValue(string method, object value)
        {
            System.Console.Error.WriteLine("exit " + method + " = " + Show(value));
        }

        // Values of primitive types and strings as such; other objects by their type, since
        // their ToString could run probed code.
        static string Show(object a)
        {
            return a == null ? "null" : a is System.IConvertible ? a.ToString() : a.GetType().Name;
        }

        public static void Exit(string method)
        {
            System.Console.Error.WriteLine("exit " + method);
        }

        public static void Bad(long x)
        {
        }

        public static int NotVoid(string method)
        {
            return 0;
        }

        public void Instance(string method)
        {
        }
    }
}
