// Lint budgets follow pepr's (complexity 10, max-params 4, max-depth 3) plus type-aware promise rules.
import { dirname, relative, resolve, sep } from 'node:path';
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import prettier from 'eslint-config-prettier';
import globals from 'globals';

// ---- The fence: which folder may import which (kindling/fence) ----
//
// Shared code: api/ (the contract: imports nothing else) and support/ (imports api/).
// Deployables: cli/, the four components and the node agent. A deployable's product code imports api/, support/ and its own
// folder, nothing else, with two doors:
//   - cli/src/commands.ts is the one composition point: the single `kindling` binary lists every deployable's
//     command there, so it alone imports their command modules (COMMAND_MODULES);
//   - cli/ (plan, status) reads a controller through its public preview module (<deployable>/src/preview.ts).
// Test code: *.test.ts, any testing/ folder, and the dev-only folders local/ (the local environment) and test/
// (test bed, benches, end-to-end). Product code never imports test code. Test code may import api/, support/,
// its own folder, local/, test/, other folders' testing/ helpers, and each deployable's public entry points
// (ENTRY_POINTS): its command and preview modules, plus the modules a test or the local environment runs
// in-process (a controller class, the drainer, the release builder). Anything else is a new crossing: add it
// here with its reason, or go through an entry point.
const SHARED = ['api', 'support'];
const DEV_ONLY = ['local', 'test'];
const COMMAND_MODULES = [
  'nodepool-controller/src/command.ts',
  'ignition-server/src/command.ts',
  'inplace-upgrader/src/command.ts',
  'node-agent/src/command.ts',
  'drainer/src/command.ts',
];
const PREVIEW = /^(nodepool-controller|inplace-upgrader)\/src\/preview\.ts$/;
const ENTRY_POINTS = new Set([
  ...COMMAND_MODULES,
  'nodepool-controller/src/preview.ts',
  'inplace-upgrader/src/preview.ts',
  // The CLI as a whole: tests run commands through main(); local/ and the manifests test list the commands.
  'cli/src/main.ts',
  'cli/src/commands.ts',
  // Run in-process by tests, benches and the local environment.
  'nodepool-controller/src/controller.ts',
  'drainer/src/drainer.ts',
  'drainer/src/plan.ts',
  'inplace-upgrader/src/upgrader.ts',
  'inplace-upgrader/src/desired.ts',
  'inplace-upgrader/src/payload.ts',
  'ignition-server/src/join.ts',
  'ignition-server/src/tokens.ts',
  'ignition-server/src/release/build.ts',
  // The local kubelet's test renders the sample releases as the ignition server does.
  'ignition-server/src/payload/render.ts',
  'ignition-server/src/release/types.ts',
]);

const topOf = (file) => file.split('/')[0];
const isTestCode = (file) => file.endsWith('.test.ts') || file.includes('/testing/') || DEV_ONLY.includes(topOf(file));

/** Why `from` may not import `to` (repository-relative .ts paths), or undefined when it may. */
export function fenceViolation(from, to) {
  if (isTestCode(from)) return testCodeViolation(from, to);
  if (isTestCode(to)) return 'product code never imports test code (tests, testing/, local/, test/)';
  const [a, b] = [topOf(from), topOf(to)];
  if (SHARED.includes(a)) return sharedViolation(a, b);
  if (a === b || SHARED.includes(b)) return undefined;
  if (from === 'cli/src/commands.ts' && COMMAND_MODULES.includes(to)) return undefined;
  if (a === 'cli') return PREVIEW.test(to) ? undefined : `${DEPLOYABLE} (and a controller's src/preview.ts)`;
  return DEPLOYABLE;
}

const DEPLOYABLE = 'a deployable imports only api/, support/ and its own folder';

function testCodeViolation(from, to) {
  const [a, b] = [topOf(from), topOf(to)];
  const open = a === b || SHARED.includes(b) || isTestCode(to) || ENTRY_POINTS.has(to);
  return open
    ? undefined
    : 'test code reaches into another folder only through its entry points (ENTRY_POINTS in eslint.config.js)';
}

function sharedViolation(a, b) {
  if (a === 'api') return b === 'api' ? undefined : 'api/ is the contract: it imports nothing else';
  return SHARED.includes(b) ? undefined : 'support/ imports only api/';
}

const ROOT = import.meta.dirname;
const fence = {
  meta: { type: 'problem', schema: [], messages: { crossing: '{{from}} may not import {{to}}: {{why}}.' } },
  create(context) {
    const from = relative(ROOT, context.filename).split(sep).join('/');
    const check = (node) => {
      const spec = node?.value;
      if (typeof spec !== 'string' || !spec.startsWith('.')) return;
      const to = relative(ROOT, resolve(dirname(context.filename), spec))
        .split(sep)
        .join('/')
        .replace(/\.js$/, '.ts');
      const why = fenceViolation(from, to);
      if (why) context.report({ node, messageId: 'crossing', data: { from, to, why } });
    };
    return {
      ImportDeclaration: (n) => check(n.source),
      ExportNamedDeclaration: (n) => check(n.source),
      ExportAllDeclaration: (n) => check(n.source),
      ImportExpression: (n) => check(n.source),
    };
  },
};

export default tseslint.config(
  { ignores: ['dist/', 'node_modules/', '.state/', '.scratch/'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    plugins: { kindling: { rules: { fence } } },
    rules: {
      'kindling/fence': 'error',
      // node:test's describe/it return promises the runner tracks itself.
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          allowForKnownSafeCalls: [
            { from: 'package', package: 'node:test', name: ['describe', 'it', 'test', 'suite', 'before', 'after'] },
          ],
        },
      ],
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/explicit-module-boundary-types': 'error',
      '@typescript-eslint/explicit-function-return-type': [
        'error',
        { allowExpressions: true, allowTypedFunctionExpressions: true },
      ],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      complexity: ['error', 10],
      'max-depth': ['error', 3],
      'max-params': ['error', 4],
      'max-lines-per-function': ['error', { max: 80, skipBlankLines: true, skipComments: true }],
      'no-console': 'error',
      'no-restricted-imports': [
        'error',
        // Two copies of the client in one process would double its memory and break instanceof ApiException.
        {
          paths: [
            {
              name: '@kubernetes/client-node',
              message: "Import '#k8s': the client as scripts/vendor.js bundles it (package.json imports).",
            },
          ],
        },
      ],
      'no-restricted-syntax': [
        'error',
        {
          // scripts/vendor.js bundles the exports it finds as `k8s.<name>` in the compiled code.
          selector:
            "ImportDeclaration[source.value='#k8s'][importKind!='type'] > ImportSpecifier[importKind!='type'], ImportDeclaration[source.value='#k8s'][importKind!='type'] > ImportDefaultSpecifier",
          message:
            "Import the client's values as `import * as k8s from '#k8s'` and name them k8s.<name>: that is how scripts/vendor.js finds what to bundle.",
        },
      ],
      eqeqeq: ['error', 'always'],
      // A file is read whole: past this budget it holds more than one job.
      'max-lines': ['error', { max: 400, skipBlankLines: true, skipComments: true }],
    },
  },
  {
    // Tests are long tables of cases; the function-length budget is for production code.
    files: ['**/*.test.ts', 'test/**/*.ts'],
    rules: { 'max-lines-per-function': 'off', 'max-lines': 'off', '@typescript-eslint/require-await': 'off' },
  },
  {
    // The plain scripts npm runs before anything is compiled, the executable and this file: linted without types.
    files: ['**/*.js'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: globals.node },
    rules: {
      // They run the compiled output (dist/), which the fence does not cover.
      'kindling/fence': 'off',
      'no-console': 'off',
      '@typescript-eslint/explicit-function-return-type': 'off',
      '@typescript-eslint/explicit-module-boundary-types': 'off',
    },
  },
  // Layout is the formatter's (npm run format): no lint rule argues with it.
  prettier,
);
