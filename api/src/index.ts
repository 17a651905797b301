export * from './keys.js';
export * from './drain-blocked.js';
export * from './conditions.js';
export * from './nodepool.js';
export * from './capi.js';
export * from './crd.js';
export * from './host-paths.js';
export * from './bootstrap.js';
