import { fileURLToPath } from 'node:url';

/** The local providers' CRDs (this module runs from dist/local/src/). */
export const LOCAL_CRD_DIR = fileURLToPath(new URL('../../../local/crds/', import.meta.url));
