"""python -m kernels.evaluator.contained MODULE ARG...: runs MODULE (as `python -m MODULE ARG...`
would) as PID 1 of a PID namespace of its own (kernels/evaluator/isolation.py enter_pid_namespace), so
that every process started below it ends when it does. How the judge starts the sandboxed processes;
where no namespace can be made the module runs as it is, and its fences report that."""
import runpy
import sys

from kernels.evaluator import isolation


def main() -> None:
    if len(sys.argv) < 2:
        print("usage: python -m kernels.evaluator.contained MODULE [ARG...]", file=sys.stderr)
        sys.exit(2)
    module = sys.argv[1]
    isolation.enter_pid_namespace()
    sys.argv = [module] + sys.argv[2:]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
