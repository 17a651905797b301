// A second reporter for run-tests.js, beside the one a person reads: one JSON line for every test or suite
// that was skipped or marked todo, so the run can fail on them (a skipped test proves nothing), and one for every
// test that failed, so the run can end by naming them: a long run's log is often read from its tail only.
export default async function* tally(source) {
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const line = classify(event.type, event.data);
    if (line !== undefined) yield `${JSON.stringify(line)}\n`;
  }
}

function classify(type, { name, file, skip, todo, details }) {
  if (skip !== undefined && skip !== false) return { kind: 'skipped', name, file, reason: skip };
  if (todo !== undefined && todo !== false) return { kind: 'todo', name, file, reason: todo };
  // A suite fails when one of its tests does; the test is named already.
  if (type === 'test:fail' && details?.error?.failureType !== 'subtestsFailed')
    return { kind: 'failed', name, file, reason: firstLines(details?.error) };
  return undefined;
}

/** The failure's own message (the runner wraps a test's error in one of its own), cut to what a summary needs. */
function firstLines(error) {
  const inner = error?.cause ?? error;
  const text = String(inner?.message ?? inner ?? 'unknown failure');
  return text.split('\n').slice(0, 6).join('\n').slice(0, 800);
}
