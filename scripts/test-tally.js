// A second reporter for run-tests.js, beside the one a person reads: one JSON line for every test or suite
// that was skipped or marked todo, so the run can fail on them (a skipped test proves nothing), and one for every
// test that failed, so the run can end by naming them: a long run's log is often read from its tail only.
export default async function* tally(source) {
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const { name, file, skip, todo, details } = event.data;
    if (skip !== undefined && skip !== false)
      yield `${JSON.stringify({ kind: 'skipped', name, file, reason: skip })}\n`;
    else if (todo !== undefined && todo !== false)
      yield `${JSON.stringify({ kind: 'todo', name, file, reason: todo })}\n`;
    else if (event.type === 'test:fail' && details?.error?.failureType !== 'subtestsFailed')
      yield `${JSON.stringify({ kind: 'failed', name, file, reason: firstLines(details?.error) })}\n`;
  }
}

/** The failure's own message (the runner wraps a test's error in one of its own), cut to what a summary needs. */
function firstLines(error) {
  const inner = error?.cause ?? error;
  const text = String(inner?.message ?? inner ?? 'unknown failure');
  return text.split('\n').slice(0, 6).join('\n').slice(0, 800);
}
