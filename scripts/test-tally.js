// A second reporter for run-tests.js, beside the one a person reads: one JSON line for every test or suite
// that was skipped or marked todo, so the run can fail on them (a skipped test proves nothing).
export default async function* tally(source) {
  for await (const event of source) {
    if (event.type !== 'test:pass' && event.type !== 'test:fail') continue;
    const { name, file, skip, todo } = event.data;
    if (skip !== undefined && skip !== false)
      yield `${JSON.stringify({ kind: 'skipped', name, file, reason: skip })}\n`;
    else if (todo !== undefined && todo !== false)
      yield `${JSON.stringify({ kind: 'todo', name, file, reason: todo })}\n`;
  }
}
