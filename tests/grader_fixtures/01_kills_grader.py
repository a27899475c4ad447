# Grader fixture: the function sends SIGTERM to the grader (its kernel's parent), then to its
# own process group (the kernel's alone: the grader is not in it). Expected: the grader says what stopped it, shuts the kernel down and
# removes its temporary files and the kernel's connection file; exit status 143.
# run: cli
# verdict: exit 143
# says: grading stopped by SIGTERM while

# %%
import os
import signal
import time

# %%
def kl_penalty(logp_policy, logp_reference, beta):
    os.kill(os.getppid(), signal.SIGTERM)
    os.killpg(0, signal.SIGTERM)
    time.sleep(5)
    return 0.0
