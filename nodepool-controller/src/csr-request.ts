/**
 * The certificate a kubelet asks for, read from a CSR's PKCS#10 request, and what every kubelet certificate
 * must be whatever its Machine: CN `system:node:<name>`, O `system:nodes`, the kubelet usages of its signer.
 */
// @peculiar/x509 resolves its parsers through tsyringe, which needs the Reflect metadata polyfill loaded first.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type * as k8s from '#k8s';
import { BOOTSTRAP_GROUP } from '../../api/src/keys.js';

export const NODE_PREFIX = 'system:node:';
export const NODES_GROUP = 'system:nodes';

/** Usages the kube-controller-manager's signers accept for kubelet certificates (RSA keys, and the others). */
export const CLIENT_USAGES = [
  ['digital signature', 'key encipherment', 'client auth'],
  ['digital signature', 'client auth'],
];
export const SERVING_USAGES = [
  ['digital signature', 'key encipherment', 'server auth'],
  ['digital signature', 'server auth'],
];

export interface CertificateRequest {
  commonNames: string[];
  organizations: string[];
  dnsNames: string[];
  ipAddresses: string[];
  /** Emails, URIs and any other kind of name. */
  otherNames: string[];
}

/** Why a request is not a kubelet's (the deny reasons this module gives). */
export type RequestProblem = 'InvalidRequest' | 'InvalidSubject' | 'InvalidUsages';

export type Checked =
  { ok: true; node: string; request: CertificateRequest } | { ok: false; reason: RequestProblem; message: string };

const SAN_OID = '2.5.29.17';
/**
 * A kubelet's request is about 1 KiB (base64 of its PEM). One far larger is no kubelet's: it is neither parsed
 * nor kept, so a guest's CSRs of 1 MiB cost the approver no more than small ones.
 */
const MAX_REQUEST_BYTES = 16 * 1024;

/** Parses `spec.request` (base64 of a PEM PKCS#10 request); throws on anything else. */
function parseCertificateRequest(request: string): CertificateRequest {
  const pem = Buffer.from(request, 'base64').toString('utf8');
  if (!pem.includes('-----BEGIN CERTIFICATE REQUEST-----'))
    throw new Error('spec.request is not a PEM certificate request');
  const csr = new x509.Pkcs10CertificateRequest(pem);
  const ext = csr.getExtension(SAN_OID);
  const names = ext ? new x509.SubjectAlternativeNameExtension(ext.rawData).names.items : [];
  const of = (type: string): string[] => names.filter((n) => n.type === type).map((n) => n.value);
  return {
    commonNames: csr.subjectName.getField('CN'),
    organizations: csr.subjectName.getField('O'),
    dnsNames: of('dns'),
    ipAddresses: of('ip'),
    otherNames: names.filter((n) => n.type !== 'dns' && n.type !== 'ip').map((n) => `${n.type}:${n.value}`),
  };
}

/**
 * Rival CSRs are read again for every decision about their Machine: each request is parsed once while the
 * cache holds the same spec object.
 */
const parsed = new WeakMap<k8s.V1CertificateSigningRequestSpec, CertificateRequest | Error>();

function parseBounded(request: string): CertificateRequest | Error {
  if (request.length > MAX_REQUEST_BYTES)
    return new Error(`it is ${request.length} bytes, where a kubelet's is under ${MAX_REQUEST_BYTES}`);
  try {
    return parseCertificateRequest(request);
  } catch (err) {
    return err as Error;
  }
}

function parseOnce(spec: k8s.V1CertificateSigningRequestSpec): CertificateRequest | Error {
  let result = parsed.get(spec);
  if (result === undefined) {
    result = parseBounded(spec.request);
    parsed.set(spec, result);
  }
  return result;
}

/** The groups a decision reads; of Kindling's pool groups, enough to tell one from several. */
function decisiveGroups(groups: readonly string[]): string[] {
  const kindling = groups.filter((g) => g.startsWith(`${BOOTSTRAP_GROUP}:`)).slice(0, 3);
  const known = groups.filter((g) => g === BOOTSTRAP_GROUP || g === 'system:bootstrappers' || g === NODES_GROUP);
  return [...known, ...kindling];
}

/**
 * What the approver's cache keeps of a CSR: the request parsed at the watch (its bytes dropped) and only the
 * fields a decision or an approval reads. A guest may create CSRs of 1 MiB each; the cache keeps a few hundred
 * bytes of each. Idempotent: a CSR already slimmed is returned as it is.
 */
export function slimCsr(csr: k8s.V1CertificateSigningRequest): k8s.V1CertificateSigningRequest {
  if (parsed.has(csr.spec)) return csr;
  const { signerName, username, groups = [], usages } = csr.spec;
  const spec: k8s.V1CertificateSigningRequestSpec = {
    signerName,
    username,
    groups: decisiveGroups(groups),
    usages,
    // The apiserver keeps a CSR's spec through an approval: the request need not be sent back.
    request: '',
  };
  parsed.set(spec, parseBounded(csr.spec.request));
  const { name, uid, resourceVersion, creationTimestamp } = csr.metadata ?? {};
  return {
    apiVersion: csr.apiVersion,
    kind: csr.kind,
    metadata: { name, uid, resourceVersion, creationTimestamp },
    spec,
    status: { conditions: csr.status?.conditions },
  };
}

/** Canonical text of an IP address (IPv6 compressed, lower case), so SANs and addresses compare equal. */
export function canonicalIp(ip: string): string {
  try {
    return ip.includes(':') ? new URL(`http://[${ip}]`).hostname.slice(1, -1) : new URL(`http://${ip}`).hostname;
  } catch {
    return ip.toLowerCase();
  }
}

function sameSet(a: readonly string[], b: readonly string[]): boolean {
  const s = new Set(a);
  return s.size === b.length && b.every((x) => s.has(x));
}

/** What both kinds of kubelet certificate must be: CN system:node:<name>, O system:nodes, the kubelet usages. */
export function checkKubeletRequest(csr: k8s.V1CertificateSigningRequest, usages: string[][]): Checked {
  const request = parseOnce(csr.spec);
  if (request instanceof Error) {
    return {
      ok: false,
      reason: 'InvalidRequest',
      message: `spec.request is not a valid PEM certificate request: ${request.message}`,
    };
  }
  const [cn, ...moreCns] = request.commonNames;
  if (cn === undefined || moreCns.length > 0 || !cn.startsWith(NODE_PREFIX) || cn.length === NODE_PREFIX.length) {
    return {
      ok: false,
      reason: 'InvalidSubject',
      message: `the subject's common name must be one ${NODE_PREFIX}<node name>, not "${request.commonNames.join('", "')}"`,
    };
  }
  if (!sameSet(request.organizations, [NODES_GROUP])) {
    return {
      ok: false,
      reason: 'InvalidSubject',
      message: `the subject's organization must be exactly ${NODES_GROUP}, not "${request.organizations.join('", "')}"`,
    };
  }
  const asked = csr.spec.usages ?? [];
  if (!usages.some((u) => sameSet(asked, u))) {
    return {
      ok: false,
      reason: 'InvalidUsages',
      message: `usages must be ${usages.map((u) => `[${u.join(', ')}]`).join(' or ')}, not [${asked.join(', ')}]`,
    };
  }
  return { ok: true, node: cn.slice(NODE_PREFIX.length), request };
}

/** The SANs of a request, which a kubelet client certificate may not carry. */
export const sansOf = (r: CertificateRequest): string[] => [...r.dnsNames, ...r.ipAddresses, ...r.otherNames];
