// What `npm run image` checks of a built image, run as the Deployments run it (deploy/base: uid 65532, a
// read-only root file system, a writable /tmp): every subcommand's `--help` starts (each loads its deployable's
// modules), the process runs as 65532 with jemalloc mapped, the root file system refuses writes and /tmp takes
// them, ignition-validate answers, and the image fits its size budget. The verdicts are pure functions over what
// the containers printed. Node built-ins only.
import { docker } from './image-engine.js';

/** The uid:gid of deploy/base/deployment-defaults.yaml. */
export const RUN_AS = { uid: 65532, gid: 65532 };
/** The Deployments' security context, as `docker run` flags: only /tmp is writable, as the Pods mount it. */
const AS_DEPLOYED = ['--rm', '--network', 'host', '--read-only', '--tmpfs', '/tmp'];

/**
 * The subcommands `kindling --help` lists.
 * @param {string} help
 */
export function listedCommands(help) {
  const block = help.split(/^Commands:$/m)[1] ?? '';
  return block
    .split('\n\n')[0]
    .split('\n')
    .map((line) => /^ {2}(\S+)/.exec(line)?.[1])
    .filter((name) => name !== undefined);
}

/** Prints, as JSON, what the process can see of itself: uid, gid, jemalloc in its maps, where it may write. */
export const PROBE = `
const fs = process.getBuiltinModule('node:fs');
const writable = (dir) => { try { fs.writeFileSync(dir + '/.probe', ''); fs.rmSync(dir + '/.probe'); return true; } catch { return false; } };
console.log(JSON.stringify({
  uid: process.getuid(), gid: process.getgid(),
  jemalloc: /libjemalloc\\.so/.test(fs.readFileSync('/proc/self/maps', 'utf8')),
  rootWritable: writable('/opt/kindling') || writable('/'), tmpWritable: writable('/tmp'),
  buildTrust: fs.existsSync('/usr/local/etc/npmrc') || fs.existsSync('/usr/local/etc/npm-build-ca.pem'),
}));`;

/**
 * What is wrong in the probe's answer (empty: nothing).
 * @param {{ uid: number, gid: number, jemalloc: boolean, rootWritable: boolean, tmpWritable: boolean, buildTrust?: boolean }} p
 */
export function probeProblems(p) {
  const problems = [];
  if (p.uid !== RUN_AS.uid || p.gid !== RUN_AS.gid)
    problems.push(`runs as ${p.uid}:${p.gid}, not ${RUN_AS.uid}:${RUN_AS.gid}`);
  if (!p.jemalloc) problems.push('jemalloc is not mapped into the process (LD_PRELOAD)');
  if (p.rootWritable) problems.push('the root file system is writable under --read-only');
  if (!p.tmpWritable) problems.push('/tmp is not writable (the payload validator needs it)');
  if (p.buildTrust) problems.push("the build machine's npm CA (/usr/local/etc/npmrc) ships in the image");
  return problems;
}

/**
 * @param {number} bytes the image's size
 * @param {number} budgetMb
 */
export function sizeProblem(bytes, budgetMb) {
  const mb = bytes / 1e6;
  return mb > budgetMb ? `the image is ${mb.toFixed(0)} MB, over its budget of ${budgetMb} MB` : undefined;
}

const inImage = (tag, entrypoint, args) => docker(['run', ...AS_DEPLOYED, '--entrypoint', entrypoint, tag, ...args]);

function commandProblems(tag) {
  const top = inImage(tag, 'kindling', ['--help']);
  if (top.status !== 0) return [`kindling --help failed (exit ${top.status}): ${top.stderr.trim()}`];
  const commands = listedCommands(top.stdout);
  if (commands.length === 0) return ['kindling --help lists no command'];
  return commands.flatMap((name) => {
    const r = inImage(tag, 'kindling', [name, '--help']);
    return r.status === 0 ? [] : [`kindling ${name} --help failed (exit ${r.status}): ${r.stderr.trim()}`];
  });
}

function processProblems(tag) {
  const r = inImage(tag, 'node', ['-e', PROBE]);
  if (r.status !== 0) return [`the probe process failed (exit ${r.status}): ${r.stderr.trim()}`];
  return probeProblems(JSON.parse(r.stdout));
}

function validatorProblems(tag) {
  const r = inImage(tag, 'ignition-validate', ['--version']);
  return r.status === 0 ? [] : [`ignition-validate is missing or broken (exit ${r.status}): ${r.stderr.trim()}`];
}

/**
 * Every problem of the image `tag`, and its size.
 * @param {string} tag
 * @param {number} budgetMb
 */
export function checkImage(tag, budgetMb) {
  const size = Number(docker(['image', 'inspect', '--format', '{{.Size}}', tag]).stdout.trim());
  const problems = [...commandProblems(tag), ...processProblems(tag), ...validatorProblems(tag)];
  const tooBig = sizeProblem(size, budgetMb);
  return { size, problems: tooBig ? [...problems, tooBig] : problems };
}
