# fanout and fanout-injector in one image: static binaries on distroless
# static, as the nonroot user. The sidecar is the entrypoint; the injector's
# Deployment runs /fanout-injector. (CI builds the same layout offline with
# `make image`, see hack/image.)
#
# The builder is pinned to the Go release go.mod requires. Its digest could
# not be resolved on the machines this was written on (they reach no image
# registry): pin it with
#   docker buildx imagetools inspect golang:1.27.3-bookworm
# and `FROM golang:1.27.3-bookworm@sha256:<digest>`. Until then the go line
# of go.mod guards the compiler: an image with an older Go refuses to build
# (GOTOOLCHAIN=local in the official images) instead of building with a
# release that has known vulnerabilities.
FROM golang:1.27.3-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS=linux TARGETARCH
# The build context holds no .git (.dockerignore), so the Go toolchain
# records no commit: pass both, as make does, for fanout version and
# fanout_build_info:
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse HEAD) .
# Left empty they read (devel) and unknown.
ARG VERSION= COMMIT=
RUN LDFLAGS="-s -w -X github.com/fanout-dev/fanout/internal/version.version=$VERSION -X github.com/fanout-dev/fanout/internal/version.commit=$COMMIT" && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="$LDFLAGS" -o /out/fanout ./cmd/fanout && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags="$LDFLAGS" -o /out/fanout-injector ./cmd/fanout-injector

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fanout /out/fanout-injector /
# So that `kubectl exec POD -c fanout -- fanout status` finds it.
ENV PATH=/:/usr/local/bin:/usr/bin:/bin
USER 65532:65532
ENTRYPOINT ["/fanout"]
