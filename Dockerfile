# fanout and fanout-injector in one image: static binaries on distroless
# static, as the nonroot user. The sidecar is the entrypoint; the injector's
# Deployment runs /fanout-injector. (CI builds the same layout offline with
# `make image`, see hack/image.)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS=linux TARGETARCH
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags='-s -w' -o /out/fanout ./cmd/fanout && \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -ldflags='-s -w' -o /out/fanout-injector ./cmd/fanout-injector

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fanout /out/fanout-injector /
USER 65532:65532
ENTRYPOINT ["/fanout"]
