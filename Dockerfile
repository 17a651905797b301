# One image for every `kindling` subcommand (nodepool-controller, ignition-server, inplace-upgrader, drainer,
# agent, release, crds). `npm run image` builds and checks it (scripts/image.js).
#
#   docker build -t ghcr.io/kindling/kindling:0.1.0 .

# Build: full dependencies, the TypeScript compile of the product only (tsconfig.build.json: no tests, no
# testing/ helpers, no local/ or test/), then only production dependencies.
FROM node:24-bookworm-slim AS build
WORKDIR /src
COPY package.json package-lock.json ./
# Without scripts, the pinned `node` development dependency brings no binary: the build runs on the image's Node 24.
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY api/src/ api/src/
COPY support/src/ support/src/
COPY cli/src/ cli/src/
COPY nodepool-controller/src/ nodepool-controller/src/
COPY ignition-server/src/ ignition-server/src/
COPY inplace-upgrader/src/ inplace-upgrader/src/
COPY drainer/src/ drainer/src/
COPY node-agent/src/ node-agent/src/
COPY scripts/vendor.js scripts/
# vendor.js: the Kubernetes client as one minified module (dist/vendor/, loaded through package.json's "imports").
RUN npx --no-install tsc -p tsconfig.build.json && node scripts/vendor.js && npm prune --omit=dev --ignore-scripts

# Runtime: the compiled JavaScript, production node_modules, the CRDs (`kindling crds`), and ignition-validate,
# which the ignition server runs on every payload it generates.
# A base assembled offline (scripts/image-base.js) carries the build machine's CA for npm alone: the runtime
# trusts only the system store.
FROM node:24-bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ignition ca-certificates libjemalloc2 \
 && rm -rf /var/lib/apt/lists/* /usr/local/etc/npmrc /usr/local/etc/npm-build-ca.pem
WORKDIR /opt/kindling
COPY --from=build /src/package.json ./
COPY --from=build /src/node_modules/ node_modules/
COPY --from=build /src/dist/ dist/
COPY api/crds/ api/crds/
COPY bin/ bin/
RUN chmod 0755 bin/kindling.js && ln -s /opt/kindling/bin/kindling.js /usr/local/bin/kindling
# The uid the Deployments run as (deploy/base/deployment-defaults.yaml); nothing in the image is writable by it.
USER 65532:65532
ENV NODE_ENV=production
# jemalloc for every process (support/src/malloc.ts says why; its test checks this line).
ENV LD_PRELOAD=libjemalloc.so.2 MALLOC_CONF=narenas:2,dirty_decay_ms:1000,muzzy_decay_ms:0,background_thread:true
ENTRYPOINT ["kindling"]
