"""`python -m cuda_agent.env.workers judge|candidate|measure`: a worker process (main.py)."""

from cuda_agent.env.workers.main import main

main()
