"""The only layer that runs processes or git: git itself (git.py), building the runner
(build.py, with the steps every build shares in steps.py), other revisions' runners in
worktrees (revisions.py) and the runner of a project of its own kinds (project.py: its
meshgate.toml), launching the runner with crash recovery (launch.py) and its progress on the
terminal (progress.py), repeated launches and their merged results (repeats.py), which cases a
command selects (selection.py), how `--impl` names an implementation and starts it
(implementations.py), `meshgate --version` (version.py) and the meshgate-plan binary
(meshgate_plan.py).

It builds on core/ only."""
