"""deploy/kubernetes/: the Indexed Job manifest, checked, and its pods simulated as local processes."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
import unittest
from pathlib import Path

from .support import CLIENT, FIXTURE_SCRIPT, HERE, run_cli, script_command, script_env
from .tiers import sans_io

MANIFEST = HERE / 'deploy' / 'kubernetes' / 'stream-client-job.json'
INDEX_ANNOTATION = "metadata.annotations['batch.kubernetes.io/job-completion-index']"


def manifest() -> tuple[dict, dict, dict]:
    """The manifest's Job, its one container and its PersistentVolumeClaim."""
    items = json.loads(MANIFEST.read_text())['items']
    job = next(item for item in items if item['kind'] == 'Job')
    claim = next(item for item in items if item['kind'] == 'PersistentVolumeClaim')
    return job, job['spec']['template']['spec']['containers'][0], claim


def expand(text: str, env: dict[str, str]) -> str:
    """$(NAME) in a container's command or args, as the kubelet expands it: the variable's value when the
    container's env defines it, $$ for one $, anything else left as it is."""
    return re.sub(r'\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)',
                  lambda m: '$' if m[0] == '$$' else env.get(m[1], m[0]), text)


class ManifestTests(unittest.TestCase):
    @sans_io
    def test_the_manifest_is_an_indexed_job_of_the_one_file_in_a_stock_image(self):
        job, container, claim = manifest()
        spec, pod = job['spec'], job['spec']['template']['spec']
        shards = spec['completions']
        self.assertEqual((job['apiVersion'], spec['completionMode'], spec['parallelism'], spec['backoffLimitPerIndex'],
                          pod['restartPolicy']), ('batch/v1', 'Indexed', shards, 0, 'Never'))
        self.assertEqual(len(pod['containers']), 1)
        self.assertEqual(container['image'], 'python:3.12-slim')
        self.assertEqual(container['command'], ['python3', '/app/stream_client.py'])
        args = container['args']
        flags = dict(zip(args[::2], args[1::2]))
        self.assertEqual(len(flags) * 2, len(args))
        self.assertEqual(flags['--shard'], f'$(JOB_COMPLETION_INDEX)/{shards}')
        self.assertEqual(flags['--start-at'], '$(START_AT)')
        self.assertTrue(flags['--output'].startswith('/evidence/'))
        self.assertIn('$(JOB_COMPLETION_INDEX)', flags['--output'])  # each pod its own file
        env = {item['name']: item for item in container['env']}
        self.assertEqual(env['JOB_COMPLETION_INDEX']['valueFrom'], {'fieldRef': {'fieldPath': INDEX_ANNOTATION}})
        self.assertEqual(env['MODEL_API_KEY']['valueFrom']['secretKeyRef']['key'], 'MODEL_API_KEY')  # never a value
        for name in re.findall(r'\$\((\w+)\)', ' '.join(args)):
            self.assertIn(name, env)  # else the kubelet would pass $(NAME) on as it is
        mounts = {mount['mountPath']: mount['name'] for mount in container['volumeMounts']}
        volumes = {volume['name']: volume for volume in pod['volumes']}
        self.assertEqual(volumes[mounts['/app']]['configMap'], {'name': 'stream-client'})
        self.assertEqual(volumes[mounts['/evidence']]['persistentVolumeClaim']['claimName'], claim['metadata']['name'])
        self.assertEqual(claim['spec']['accessModes'], ['ReadWriteMany'])  # pods on many nodes write to it

    def test_its_pods_simulated_as_local_processes_send_the_one_load_and_summarize_as_one(self):
        job, container, _ = manifest()
        shards = job['spec']['completions']
        with tempfile.TemporaryDirectory() as tmp:
            app, evidence = Path(tmp, 'app'), Path(tmp, 'evidence')
            app.mkdir()
            evidence.mkdir()
            shutil.copy(CLIENT, app / 'stream_client.py')  # the ConfigMap's two files
            (app / 'prompts.jsonl').write_text('"Reply with exactly the word READY."\n"Say hi."\n')
            server = subprocess.Popen(script_command(FIXTURE_SCRIPT, '--port', '0', '--delay', '0.001'),
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=script_env())
            try:
                url = server.stdout.readline().split()[-1]
                start = time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() + 2))
                given = {'TARGET_URL': url, 'RUNS': '60', 'RATE': '100', 'START_AT': start}  # what a user edits
                pods = []
                for index in range(shards):
                    env = {item['name']: given.get(item['name'], item.get('value')) for item in container['env']
                           if 'value' in item}
                    env['JOB_COMPLETION_INDEX'] = str(index)  # the downward API's annotation
                    line = [expand(part, env).replace('/app/', f'{app}/').replace('/evidence/', f'{evidence}/')
                            for part in container['command'] + container['args']]
                    self.assertEqual(line[:2], ['python3', f'{app}/stream_client.py'])
                    pods.append(subprocess.Popen(script_command(line[1], *line[2:]), cwd=tmp, env=script_env(env),
                                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
                ends = [(pod.communicate(timeout=120), pod.returncode) for pod in pods]
            finally:
                server.kill()
                server.communicate()
            self.assertEqual([status for _, status in ends], [0] * shards, ends)
            files = sorted(path.name for path in evidence.iterdir())
            self.assertEqual(files, [f'load-1-shard-{index}.jsonl' for index in range(shards)])
            done = run_cli('--summary', *files, cwd=str(evidence))
            self.assertEqual(done.returncode, 0, done.stderr)
            summary = json.loads(done.stdout)
            self.assertEqual((summary['runs'], summary['ok'], summary['planned_runs']), (60, 60, 60))
            runs = sorted(json.loads(line)['run']
                          for name in files for line in (evidence / name).read_text().splitlines())
            self.assertEqual(runs, list(range(60)))


if __name__ == '__main__':
    unittest.main()
