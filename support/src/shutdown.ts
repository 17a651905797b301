/**
 * Graceful shutdown: on SIGTERM or SIGINT, run the registered closers in reverse order of registration
 * (servers stop accepting, queues finish in-flight work, leases are released), then exit. A second
 * signal, or closers running past the deadline, exits at once.
 */
import type { Logger } from './logger.js';

export interface Shutdown {
  /** Registers a closer; closers run last-registered first. */
  add(name: string, close: () => Promise<void> | void): void;
  /** Runs the closers and resolves; the process exits after this when triggered by a signal. */
  run(reason: string): Promise<void>;
  /** Resolves once shutdown has begun. */
  readonly begun: Promise<string>;
}

export function createShutdown(
  log: Logger,
  deadlineMs = 20_000,
  exit: (code: number) => void = (c) => process.exit(c),
): Shutdown {
  const closers: { name: string; close: () => Promise<void> | void }[] = [];
  let running: Promise<void> | undefined;
  const { promise: begun, resolve: begin } = Promise.withResolvers<string>();

  const run = (reason: string): Promise<void> => {
    if (running) return running;
    begin(reason);
    log.info({ reason }, 'Shutting down');
    running = (async () => {
      for (const { name, close } of closers.reverse()) {
        try {
          await close();
        } catch (err) {
          log.error({ err, closer: name }, 'Closer failed during shutdown');
        }
      }
    })();
    return running;
  };

  const onSignal = (signal: NodeJS.Signals): void => {
    if (running) {
      log.warn({ signal }, 'Second signal: exiting now');
      exit(1);
      return;
    }
    const timer = setTimeout(() => {
      log.error({ deadlineMs }, 'Shutdown deadline passed: exiting');
      exit(1);
    }, deadlineMs);
    timer.unref();
    void run(signal).then(() => exit(0));
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);

  return { add: (name, close) => void closers.push({ name, close }), run, begun };
}
