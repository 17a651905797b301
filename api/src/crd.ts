import { fileURLToPath } from 'node:url';

/** Folder of Kindling's CRD manifests (this module runs from dist/api/src/). */
export const CRD_DIR = fileURLToPath(new URL('../../../api/crds/', import.meta.url));
