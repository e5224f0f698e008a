// Package sqlitefile keeps Cairn's SQLite files private: readable and writable only by the
// user the services run as. SQLite has no roles, so a database file's permissions are its
// only boundary (docs/trust.md, "Least privilege in the databases"); the driver creates a file 0644,
// and a database's -wal and -shm files take the permissions of its main file.
package sqlitefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Mode is the permissions of a SQLite file Cairn opens.
const Mode fs.FileMode = 0o600

// Private makes the SQLite file at path, before it is opened: it creates it empty with Mode
// when missing (SQLite takes an empty file as a new database, and makes its -wal and -shm
// with the same permissions), and takes away any permission beyond Mode from an existing
// one and from its -wal and -shm (a file an earlier release created 0644).
func Private(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, Mode)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("creating the SQLite file %s: %w", path, err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		info, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("the SQLite file %s: %w", p, err)
		}
		if info.Mode().Perm()&^Mode == 0 {
			continue
		}
		if err := os.Chmod(p, info.Mode().Perm()&Mode); err != nil {
			return fmt.Errorf("making the SQLite file %s private (mode %v): %w", p, info.Mode().Perm()&Mode, err)
		}
	}
	return nil
}
