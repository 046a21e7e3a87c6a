package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/nodus-dev/nodus/pkg/apis/nodus/validation"
)

// ErrImageNotFound: the execution names an image the host does not have.
var ErrImageNotFound = errors.New("image not found on this host")

var digestHex = regexp.MustCompile(`^[a-f0-9]{64}$`)

// imageRoot is the unpacked root filesystem of image ref, from the OCI
// layout directory IMAGES-DIR/NAME or the archive IMAGES-DIR/NAME.tar,
// unpacked with umoci once per manifest digest and shared read-only.
func (rt *Runtime) imageRoot(ref string) (string, error) {
	// Checked again here: a name becomes a path.
	name, tag, err := validation.ParseImage(ref)
	if err != nil {
		return "", err
	}
	if rt.ImagesDir == "" {
		return "", fmt.Errorf("%w: %s (no images directory is configured)", ErrImageNotFound, ref)
	}
	rt.imagesMu.Lock()
	defer rt.imagesMu.Unlock()
	layout, err := rt.layout(name)
	if err != nil {
		return "", err
	}
	digest, err := manifestDigest(layout, tag)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrImageNotFound, ref, err)
	}
	root := filepath.Join(rt.StateDir, "images", "rootfs", digest)
	if _, err := os.Stat(root); err == nil {
		return root, nil
	}
	if _, err := exec.LookPath("umoci"); err != nil {
		return "", errors.New("images need umoci (Debian: apt-get install umoci)")
	}
	unpacking := root + ".unpacking"
	_ = os.RemoveAll(unpacking)
	if err := os.MkdirAll(filepath.Dir(root), 0o700); err != nil {
		return "", err
	}
	if out, err := exec.Command("umoci", "raw", "unpack", "--image", layout+":"+tag, unpacking).CombinedOutput(); err != nil {
		_ = os.RemoveAll(unpacking)
		return "", fmt.Errorf("unpacking image %s: %v: %s", ref, err, bytes.TrimSpace(out))
	}
	// The mount points the sandbox needs, made once in the shared root: as
	// directories and a file of the root itself. The image's own symlink
	// there (tmp -> /etc) would lead these writes, made as root, out to the
	// host's files: it is replaced.
	for _, dir := range []string{"proc", "dev", "sys", "tmp", strings.TrimPrefix(WorkDir, "/"), "etc"} {
		if err := realDir(unpacking, dir); err != nil {
			return "", fmt.Errorf("image %s: %w", ref, err)
		}
	}
	// Where an egress sandbox's resolver configuration is bound.
	if err := realFile(filepath.Join(unpacking, "etc", "resolv.conf")); err != nil {
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	if err := os.Chmod(filepath.Join(unpacking, "tmp"), 0o1777|os.ModeSticky); err != nil {
		return "", err
	}
	if err := os.Chmod(unpacking, 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(unpacking, root); err != nil {
		return "", err
	}
	return root, nil
}

// realDir makes rel (slash-separated) a directory of root's own: each
// component a directory, none a symlink (one is replaced by a directory).
func realDir(root, rel string) error {
	p := root
	for _, part := range strings.Split(rel, "/") {
		p = filepath.Join(p, part)
		info, err := os.Lstat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return err
		case info.Mode()&os.ModeSymlink != 0:
			if err := os.Remove(p); err != nil {
				return err
			}
		case info.IsDir():
			continue
		default:
			return fmt.Errorf("/%s is not a directory", rel)
		}
		if err := os.Mkdir(p, 0o755); err != nil {
			return err
		}
	}
	return nil
}

// realFile makes path a regular file, empty if it was none: a symlink
// there is replaced, never followed.
func realFile(path string) error {
	info, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case info.Mode().IsRegular():
		return nil
	case info.Mode()&os.ModeSymlink != 0:
		if err := os.Remove(path); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s is not a file", filepath.Base(path))
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}

// layout is the OCI layout directory of image name: IMAGES-DIR/NAME, or
// IMAGES-DIR/NAME.tar extracted once (again when the archive changes).
func (rt *Runtime) layout(name string) (string, error) {
	dir := filepath.Join(rt.ImagesDir, name)
	if info, err := os.Stat(filepath.Join(dir, "index.json")); err == nil && info.Mode().IsRegular() {
		return dir, nil
	}
	archive := dir + ".tar"
	info, err := os.Stat(archive)
	if err != nil {
		return "", fmt.Errorf("%w: %s (neither %s nor %s)", ErrImageNotFound, name, dir, archive)
	}
	extracted := filepath.Join(rt.StateDir, "images", "layouts", fmt.Sprintf("%s-%d-%d", name, info.Size(), info.ModTime().UnixNano()))
	if _, err := os.Stat(filepath.Join(extracted, "index.json")); err == nil {
		return extracted, nil
	}
	if err := os.MkdirAll(extracted, 0o700); err != nil {
		return "", err
	}
	if out, err := exec.Command("tar", "-xf", archive, "-C", extracted, "--no-same-owner").CombinedOutput(); err != nil {
		_ = os.RemoveAll(extracted)
		return "", fmt.Errorf("extracting %s: %v: %s", archive, err, bytes.TrimSpace(out))
	}
	return extracted, nil
}

// manifestDigest is the hex digest of tag's manifest in layout's index.
func manifestDigest(layout, tag string) (string, error) {
	data, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		return "", err
	}
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(data, &index); err != nil {
		return "", fmt.Errorf("index.json: %w", err)
	}
	for _, m := range index.Manifests {
		if m.Annotations["org.opencontainers.image.ref.name"] == tag {
			hex, ok := strings.CutPrefix(m.Digest, "sha256:")
			if !ok || !digestHex.MatchString(hex) {
				return "", fmt.Errorf("tag %s has digest %q, not sha256", tag, m.Digest)
			}
			return hex, nil
		}
	}
	return "", fmt.Errorf("no tag %s", tag)
}
