"""The KernelOptimization workflow, its run models and its pure decision helpers."""
