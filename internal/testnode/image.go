package testnode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path"
	"runtime"
	"time"
)

// Image is a single-layer image of static binaries, as the Dockerfile's
// distroless image holds them: no shell, a non-root user.
type Image struct {
	// Name is the full reference, say toolledger.local/toolledger:dev.
	Name string
	// Binaries maps a path in the image (/manager) to a file of the machine.
	Binaries map[string]string
	// Entrypoint is the command the image runs.
	Entrypoint []string
	// User is the numeric user and group, say 65532:65532.
	User string
}

// epoch dates every file of the layer, so that the same binaries make the
// same image.
var epoch = time.Unix(0, 0)

// WriteImage writes img as an OCI image layout in a tar archive at archive,
// which ctr images import loads under img.Name.
func WriteImage(archive string, img Image) error {
	layer, err := imageLayer(img)
	if err != nil {
		return err
	}
	layerDigest := digestOf(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"User": img.User, "Entrypoint": img.Entrypoint, "Env": []string{"PATH=/"}, "WorkingDir": "/"},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers": []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer)},
	})
	if err != nil {
		return err
	}
	manifestDescriptor := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	manifestDescriptor["platform"] = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	manifestDescriptor["annotations"] = map[string]string{"io.containerd.image.name": img.Name, "org.opencontainers.image.ref.name": img.Name}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []any{manifestDescriptor},
	})
	if err != nil {
		return err
	}
	out, err := os.Create(archive)
	if err != nil {
		return err
	}
	w := tar.NewWriter(out)
	for _, entry := range []struct {
		name    string
		content []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(config), config},
		{blobPath(manifest), manifest},
		{blobPath(layer), layer},
	} {
		if err := writeTarFile(w, entry.name, 0o644, entry.content); err != nil {
			return err
		}
	}
	return errors.Join(w.Close(), out.Close())
}

// imageLayer is the image's one layer: its binaries, /etc/passwd and
// /etc/group naming its user, and a /tmp.
func imageLayer(img Image) ([]byte, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, dir := range []struct {
		name string
		mode int64
	}{{"etc/", 0o755}, {"tmp/", 0o1777}} {
		if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir.name, Mode: dir.mode, ModTime: epoch}); err != nil {
			return nil, err
		}
	}
	if err := writeTarFile(w, "etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n")); err != nil {
		return nil, err
	}
	if err := writeTarFile(w, "etc/group", 0o644, []byte("root:x:0:\nnonroot:x:65532:\n")); err != nil {
		return nil, err
	}
	for name, file := range img.Binaries {
		content, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		if err := writeTarFile(w, path.Clean(name)[1:], 0o755, content); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), w.Close()
}

func writeTarFile(w *tar.Writer, name string, mode int64, content []byte) error {
	if err := w.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(content)), ModTime: epoch}); err != nil {
		return err
	}
	_, err := io.Copy(w, bytes.NewReader(content))
	return err
}

func digestOf(content []byte) string {
	sum := sha256.Sum256(content)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(content []byte) string {
	sum := sha256.Sum256(content)
	return "blobs/sha256/" + hex.EncodeToString(sum[:])
}

func descriptor(mediaType string, content []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digestOf(content), "size": len(content)}
}
