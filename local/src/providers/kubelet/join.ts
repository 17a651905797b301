/** How a host's kubelet joins: its CSRs' names and outcomes, and the refusals it retries or gives up on. */
import { createHash } from 'node:crypto';
import type * as k8s from '#k8s';
import { statusCode, TerminalError } from '../../../../support/src/errors.js';

export const KUBELET_CLIENT_SIGNER = 'kubernetes.io/kube-apiserver-client-kubelet';
export const KUBELET_SERVING_SIGNER = 'kubernetes.io/kubelet-serving';
export const CLIENT_USAGES = ['digital signature', 'client auth'];
export const SERVING_USAGES = ['digital signature', 'server auth'];

/** Reasons of the Joined and ServingCertificate conditions. */
export const KUBELET_REASONS = {
  joined: 'Joined',
  issued: 'Issued',
  noJoinMaterial: 'NoJoinMaterial',
  bootstrapTokenRejected: 'BootstrapTokenRejected',
  bootstrapForbidden: 'BootstrapForbidden',
  waitingForApproval: 'WaitingForApproval',
  csrDenied: 'CSRDenied',
  csrFailed: 'CSRFailed',
  registrationRefused: 'RegistrationRefused',
  apiserverUnreachable: 'APIServerUnreachable',
} as const;

/** A refusal the kubelet keeps retrying (the token may arrive, RBAC may be applied, an approval may come). */
export class RetryableJoinError extends Error {
  override readonly name = 'RetryableJoinError';
  constructor(
    message: string,
    readonly reason: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/**
 * A CSR's name from its key and what it asks for (not the request's bytes: an ECDSA signature differs each
 * time), so a restarted kubelet, or one whose wait ran out, finds the CSR it submitted rather than adding one.
 */
export function csrName(prefix: string, keyPem: string, asked: readonly string[]): string {
  const digest = createHash('sha256').update(keyPem);
  for (const part of asked) digest.update('\0').update(part);
  return `${prefix}${digest
    .digest('base64url')
    .toLowerCase()
    .replace(/[^a-z0-9]/g, '')}`.slice(0, 63);
}

export type CsrOutcome =
  | { state: 'issued'; certPem: string }
  | { state: 'denied' | 'failed'; message: string }
  | { state: 'pending'; approved: boolean };

/** Where a CSR stands: issued, denied or failed (with the decider's reason and message), or still pending. */
export function csrOutcome(csr: k8s.V1CertificateSigningRequest): CsrOutcome {
  const conditions = csr.status?.conditions ?? [];
  const said = (type: string): string | undefined => {
    const c = conditions.find((x) => x.type === type && x.status !== 'False');
    return c ? [c.reason, c.message].filter(Boolean).join(': ') || type : undefined;
  };
  const denied = said('Denied');
  if (denied !== undefined) return { state: 'denied', message: denied };
  const failed = said('Failed');
  if (failed !== undefined) return { state: 'failed', message: failed };
  if (csr.status?.certificate)
    return { state: 'issued', certPem: Buffer.from(csr.status.certificate, 'base64').toString() };
  return { state: 'pending', approved: said('Approved') !== undefined };
}

/** The apiserver's own message of a refused request, or the error's. */
export function apiMessage(err: unknown): string {
  const body = (err as { body?: unknown }).body;
  if (typeof body === 'string') {
    try {
      const message = (JSON.parse(body) as { message?: unknown }).message;
      if (typeof message === 'string' && message !== '') return message;
    } catch {
      if (body.trim() !== '') return body.trim();
    }
  }
  return (err as Error).message ?? String(err);
}

/** The condition an error of the join leaves, and whether the kubelet gives up (terminal) or retries. */
export function joinFailure(err: unknown): { reason: string; message: string; terminal: boolean } {
  if (err instanceof TerminalError) return { reason: err.reason, message: err.message, terminal: true };
  if (err instanceof RetryableJoinError) return { reason: err.reason, message: err.message, terminal: false };
  return { reason: KUBELET_REASONS.apiserverUnreachable, message: apiMessage(err), terminal: false };
}

/** Refusals of the bootstrap token's requests, said as a kubelet operator would want to read them. */
export function bootstrapRefusal(err: unknown): unknown {
  const code = statusCode(err);
  if (code === 401)
    return new RetryableJoinError(
      'the guest apiserver refused the bootstrap token (401 Unauthorized): it expired, was deleted or never existed',
      KUBELET_REASONS.bootstrapTokenRejected,
      { cause: err },
    );
  if (code === 403)
    return new RetryableJoinError(
      `the bootstrap token may not submit CSRs: ${apiMessage(err)}`,
      KUBELET_REASONS.bootstrapForbidden,
      { cause: err },
    );
  return err;
}
