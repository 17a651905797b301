/** CPU seconds of a process from its /proc/<pid>/stat text (utime + stime, in clock ticks of 1/100 s). */
export function processCpuSeconds(stat: string): number {
  // Fields after the command name (which may hold spaces) start at its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}
