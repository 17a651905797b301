/** The credentials a kubelet holds once bootstrapped, and the kubeconfigs made from them. */
import * as k8s from '#k8s';
import { HOST_PATHS } from '../../../../api/src/host-paths.js';
import type { BootstrapMaterial } from './host-files.js';

export interface Credentials {
  material: BootstrapMaterial;
  certPem: string;
  keyPem: string;
}

export const combined = (c: { certPem: string; keyPem: string }): string => `${c.certPem.trimEnd()}\n${c.keyPem}`;

export function splitPem(pem: string): { certPem: string; keyPem: string } | undefined {
  const cert = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/.exec(pem)?.[0];
  const key = /-----BEGIN (?:EC |)PRIVATE KEY-----[\s\S]+?-----END (?:EC |)PRIVATE KEY-----/.exec(pem)?.[0];
  return cert && key ? { certPem: `${cert}\n`, keyPem: `${key}\n` } : undefined;
}

export function kubeConfigOf(material: BootstrapMaterial, user: k8s.User): k8s.KubeConfig {
  const kc = new k8s.KubeConfig();
  kc.loadFromOptions({
    clusters: [
      {
        name: 'guest',
        server: material.server,
        caData: Buffer.from(material.caPem).toString('base64'),
        skipTLSVerify: false,
      },
    ],
    users: [user],
    contexts: [{ name: 'kubelet', cluster: 'guest', user: user.name }],
    currentContext: 'kubelet',
  });
  return kc;
}

export const b64 = (s: string): string => Buffer.from(s).toString('base64');

/** The kubeconfig a kubelet keeps once bootstrapped: host paths, as the kubelet on the host would read them. */
export function kubeletKubeconfig(material: BootstrapMaterial): string {
  return [
    'apiVersion: v1',
    'kind: Config',
    `clusters:\n- name: default-cluster\n  cluster:\n    server: ${material.server}\n    certificate-authority-data: ${b64(material.caPem)}`,
    `users:\n- name: default-auth\n  user:\n    client-certificate: ${HOST_PATHS.kubeletClientCert}\n    client-key: ${HOST_PATHS.kubeletClientCert}`,
    'contexts:\n- name: default-context\n  context:\n    cluster: default-cluster\n    user: default-auth',
    'current-context: default-context',
    '',
  ].join('\n');
}
