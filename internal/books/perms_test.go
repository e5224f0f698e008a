package books

import (
	"os"
	"path/filepath"
	"testing"
)

// The ledger's and the ERP's SQLite files, their -wal and -shm included, are readable and
// writable only by the user the services run as (SQLite has no roles: the files' permissions
// are the boundary); a file an earlier release made 0644 is made private when it is opened.
func TestSQLiteFilesPrivate(t *testing.T) {
	dir := t.TempDir()
	fresh, old := filepath.Join(dir, "ledger.db"), filepath.Join(dir, "erp.db")
	if err := os.WriteFile(old, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(old, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	for _, path := range []string{fresh, old} {
		db := openSQLiteAt(t, path)
		if _, err := db.SQL().ExecContext(t.Context(), "CREATE TABLE IF NOT EXISTS probe(x)"); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			info, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if perm := info.Mode().Perm(); perm != 0o600 {
				t.Errorf("%s: mode %v, want -rw-------", filepath.Base(p), perm)
			}
		}
	}
}
