"""Assembly: the agent's parts made once, in the order who needs whom, before anything runs.

`pod_path` builds the pod path (the part the unit tests' core builds too, on the fake runtime);
`parts` builds everything else around it from the settings. agent.py only runs what they made.
"""
