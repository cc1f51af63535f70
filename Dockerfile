# syntax=docker/dockerfile:1
#
# fleetnet-hub: a static (musl) binary in a distroless image, running as uid 65532 with nothing
# writable. rustls is used throughout, so no OpenSSL; only ring's and psm's C/asm and jemalloc
# (the allocator, built from its C sources with make) need musl-gcc.
#
#   docker build -t fleetnet-hub:dev .
#
# The chart runs it as `fleetnet-hub run ...` (the CMD below is only the default).

ARG RUST_VERSION=1.95
ARG TARGET=x86_64-unknown-linux-musl

FROM docker.io/library/rust:${RUST_VERSION}-bookworm AS build
ARG TARGET
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
RUN rustup target add "${TARGET}"
WORKDIR /src
# The whole workspace (tests/testenv is a workspace member, so the lockfile needs it); .dockerignore
# keeps target/, .git and kubeconfigs/ out of the context. --no-default-features drops the `sandbox`
# command and with it the test substrate: the image links no process spawner it never uses.
COPY . .
ENV CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_TERM_COLOR=never
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --no-default-features --target "${TARGET}" --bin fleetnet-hub \
 && install -D -m 0755 "target/${TARGET}/release/fleetnet-hub" /out/fleetnet-hub \
 && (file /out/fleetnet-hub 2>/dev/null || true)

# distroless/static: CA certificates (for Azure ARM over rustls' native roots), /etc/passwd with
# the nonroot user (65532), no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="fleetnet-hub" \
      org.opencontainers.image.description="Exports every member cluster's Services to the Azure Kubernetes Fleet hub" \
      org.opencontainers.image.licenses="MIT"
COPY --from=build /out/fleetnet-hub /fleetnet-hub
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/fleetnet-hub"]
CMD ["run"]
