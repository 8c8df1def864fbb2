"""The example CI set-ups under ci/examples/: the GitHub Actions workflows parse, run on the
triggers they are meant for and call scripts that exist with arguments the driver accepts;
the Slurm script and the cron line do the same."""

import os
import pathlib
import re
import shlex
import subprocess
import unittest

from meshgate import cli

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "ci" / "examples"

try:
    import yaml  # PyYAML: the `test` extra, in every environment ci/bootstrap makes
except ImportError:  # pragma: no cover
    yaml = None


def expand(text: str) -> str:
    """Shell text with ${VAR:-default} replaced by the default and other expansions by a word,
    so that argparse sees what the script would pass."""
    text = re.sub(r"\$\{[A-Za-z_]+:-([^}]*)\}", r"\1", text)
    text = re.sub(r"\$\(date[^)]*\)", "20261124", text)
    text = re.sub(r"\$\{\{[^}]*\}\}", "x", text)
    return re.sub(r"\$\{?[A-Za-z_]+\}?", "x", text)


def script_calls(command: str) -> list[tuple[str, list[str]]]:
    """(script, arguments) of every ci/ script a shell command line runs."""
    calls = []
    for part in re.split(r"&&|\|\||;|\n", expand(command)):
        words = shlex.split(part.split(">>")[0], comments=True)
        for i, word in enumerate(words):
            if word.startswith("ci/"):
                calls.append((word, words[i + 1:]))
                break
    return calls


class ScriptCallChecks(unittest.TestCase):
    def check_call(self, script: str, args: list[str]) -> None:
        path = REPO / script
        self.assertTrue(path.is_file(), f"{script} does not exist")
        self.assertTrue(os.access(path, os.X_OK), f"{script} is not executable")
        parser = cli.build_parser()
        if script == "ci/nightly":
            parser.parse_args(["nightly", *args])  # SystemExit (a failure) on an unknown option
        elif script == "ci/premerge":
            parser.parse_args(["ab", "--base", "x", "--candidate", "HEAD", *args])


@unittest.skipIf(yaml is None, "PyYAML is not installed")
class GithubWorkflowsTest(ScriptCallChecks):
    def load(self, name):
        doc = yaml.safe_load((EXAMPLES / name).read_text())
        self.assertIsInstance(doc, dict)
        triggers = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` as true
        return doc, triggers

    def steps(self, doc):
        for job in doc["jobs"].values():
            self.assertIn("self-hosted", job["runs-on"])
            yield from job["steps"]

    def check_steps(self, doc) -> list[str]:
        scripts = []
        for step in self.steps(doc):
            self.assertTrue(("uses" in step) != ("run" in step), step)
            if "uses" in step:
                self.assertRegex(step["uses"], r"^actions/[a-z-]+(/[a-z]+)?@v\d+$")
            else:
                for script, args in script_calls(step["run"]):
                    self.check_call(script, args)
                    scripts.append(script)
        return scripts

    def test_premerge_runs_ci_premerge_on_pull_requests(self):
        doc, triggers = self.load("github-premerge.yml")
        self.assertIn("pull_request", triggers)
        self.assertEqual(self.check_steps(doc), ["ci/premerge"])
        checkout = next(s for s in self.steps(doc) if s.get("uses", "").startswith("actions/checkout"))
        self.assertEqual(checkout["with"]["fetch-depth"], 0)  # the A/B builds the merge base
        text = (EXAMPLES / "github-premerge.yml").read_text()
        self.assertIn("GITHUB_STEP_SUMMARY", text)
        self.assertIn("actions/upload-artifact", text)

    def test_nightly_runs_ci_nightly_on_a_schedule_and_keeps_its_history(self):
        doc, triggers = self.load("github-nightly.yml")
        cron = triggers["schedule"][0]["cron"]
        self.assertEqual(len(cron.split()), 5)
        self.assertEqual(self.check_steps(doc), ["ci/nightly"])
        run = next(s["run"] for s in self.steps(doc) if "ci/nightly" in s.get("run", ""))
        args = cli.build_parser().parse_args(["nightly", *script_calls(run)[0][1]])
        cache = [s for s in self.steps(doc) if s.get("uses", "").startswith("actions/cache")]
        self.assertEqual({s["uses"].split("@")[0] for s in cache}, {"actions/cache/restore", "actions/cache/save"})
        kept = {s["with"]["path"] for s in cache}
        self.assertEqual(kept, {".meshgate-state"})
        self.assertTrue(str(args.db).startswith(".meshgate-state/"))
        self.assertTrue(str(args.state).startswith(".meshgate-state/"))


class SlurmAndCronTest(ScriptCallChecks):
    def test_sbatch_script_is_valid_bash_with_directives_and_runs_the_nightly_under_srun(self):
        path = EXAMPLES / "slurm-nightly.sbatch"
        subprocess.run(["bash", "-n", str(path)], check=True)
        text = path.read_text()
        directives = re.findall(r"^#SBATCH (--[a-z-]+)", text, re.M)
        self.assertTrue({"--nodes", "--ntasks-per-node", "--time"} <= set(directives), directives)
        calls = script_calls(text.replace("\\\n", " "))
        self.assertEqual([c[0] for c in calls], ["ci/nightly"])
        self.check_call(*calls[0])
        args = cli.build_parser().parse_args(["nightly", *calls[0][1]])
        self.assertIn(args.backend, ("mpi", "nccl"))

    def test_cron_line(self):
        lines = [l for l in (EXAMPLES / "nightly.cron").read_text().splitlines() if l and not l.startswith("#")]
        self.assertEqual(len(lines), 1)
        fields = lines[0].split(None, 5)
        self.assertEqual(len(fields), 6)
        for field in fields[:5]:
            self.assertRegex(field, r"^[\d*/,-]+$")
        calls = script_calls(fields[5].replace("\\%", "%"))
        self.assertEqual([c[0] for c in calls], ["ci/nightly"])
        self.check_call(*calls[0])


if __name__ == "__main__":
    unittest.main()
