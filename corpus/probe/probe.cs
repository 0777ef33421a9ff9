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
