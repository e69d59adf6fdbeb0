"""Task and solution formats, and loaders for KernelBench folders and datasets."""

from cuda_agent.tasks.task import Task, TaskError, load_task_module, strip_reference_model
from cuda_agent.tasks.loaders import load_task, load_dataset, KERNELBENCH_ENV
from cuda_agent.tasks.solution import Solution, SolutionError, load_solution

__all__ = [
    "Task", "TaskError", "load_task_module", "strip_reference_model",
    "load_task", "load_dataset", "KERNELBENCH_ENV",
    "Solution", "SolutionError", "load_solution",
]
