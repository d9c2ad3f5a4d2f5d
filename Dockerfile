# syntax=docker/dockerfile:1

# Builds the toolledger manager (cmd/manager), the MCP gateway
# (cmd/toolledger-mcp, the chart's mcpGateway runs it as /toolledger-mcp) and
# the web console (cmd/toolledger-console, the chart's console runs it as
# /toolledger-console) into static binaries and ships them on distroless: no shell, no package manager,
# a non-root user.
#
#   docker build -t ghcr.io/toolledger/toolledger:dev .
#
# BuildKit is required for the cache mounts (default in Docker >= 23).

FROM golang:1.26 AS builder
# Set by BuildKit for multi-platform builds (docker buildx --platform); when
# empty, go build targets the builder's own platform.
ARG TARGETOS
ARG TARGETARCH
WORKDIR /workspace

# Dependencies first, so that a source change does not refetch modules.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download

COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /manager ./cmd/manager && \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /toolledger-mcp ./cmd/toolledger-mcp && \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o /toolledger-console ./cmd/toolledger-console

FROM gcr.io/distroless/static:nonroot
LABEL org.opencontainers.image.source="https://github.com/toolledger/toolledger" \
      org.opencontainers.image.description="toolledger operator manager"
WORKDIR /
COPY --from=builder /manager /manager
COPY --from=builder /toolledger-mcp /toolledger-mcp
COPY --from=builder /toolledger-console /toolledger-console
# Numeric, so that the pod's runAsNonRoot check can verify it without /etc/passwd.
USER 65532:65532
ENTRYPOINT ["/manager"]
