package identity_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cairnhq/cairn/pkg/identity"
)

// A signing seed cairn init or cairn dev writes is readable by its owner alone (0600), in a
// folder only its owner may enter (0700): one it makes, and one that existed open to others
// (a data folder made 0755), which is closed before the seed is written.
func TestSeedFilesPrivate(t *testing.T) {
	base := t.TempDir()
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(base, "data", "keys"), open} {
		if _, err := identity.EnsureSeed(dir, "fetch"); err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]os.FileMode{dir: 0o700, identity.SeedFile(dir, "fetch"): 0o600} {
			info, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := info.Mode().Perm(); got != want {
				t.Errorf("%s: mode %v, want %v", path, got, want)
			}
		}
	}
}
