package pgtest

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// superuser is the role initdb creates.
const superuser = "postgres"

// watcherStdin is the write end of the watcher's stdin. It is never written or closed:
// the watcher reads EOF when this process ends. Kept here so no finalizer closes it.
var watcherStdin *os.File

// watcher waits for EOF on stdin, then stops the server and deletes its folder.
const watcher = `cat >/dev/null; "$0" stop -D "$1" -m immediate -w >/dev/null 2>&1; rm -rf "$2"`

// start runs a throwaway server for this test binary and returns its DSN.
func start() (string, error) {
	bin, err := findBin()
	if err != nil {
		return "", err
	}
	cred, err := serverUser()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "cairn-pgtest-")
	if err != nil {
		return "", err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	data := filepath.Join(dir, "data")
	pgCtl := filepath.Join(bin, "pg_ctl")
	// The watcher first: from here on, the folder goes when the process does.
	if err := startWatcher(dir, cred, pgCtl, data); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	password, err := randomHex(16)
	if err != nil {
		return "", err
	}
	pwfile := filepath.Join(dir, "pwfile")
	if err := writeOwned(pwfile, password+"\n", cred); err != nil {
		return "", err
	}
	// --no-locale: the OS may have no locale but C; test databases choose ICU themselves.
	if err := run(dir, cred, filepath.Join(bin, "initdb"), "-D", data, "-U", superuser, "--pwfile", pwfile,
		"--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-locale", "--no-sync"); err != nil {
		return "", err
	}
	conf := fmt.Sprintf("\n# pgtest\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n"+
		"fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 200\n", dir)
	if err := appendFile(filepath.Join(data, "postgresql.conf"), conf); err != nil {
		return "", err
	}
	// A free port may be taken between choosing and binding it: try a few.
	var errs []error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return "", err
		}
		err = run(dir, cred, pgCtl, "start", "-w", "-t", "120", "-D", data, "-l", filepath.Join(dir, "server.log"),
			"-o", "-p "+strconv.Itoa(port))
		if err == nil {
			return fmt.Sprintf("postgres://%s:%s@127.0.0.1:%d/postgres?sslmode=disable", superuser, password, port), nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("starting PostgreSQL in %s: %w", dir, errors.Join(errs...))
}

// findBin returns the folder that holds initdb and pg_ctl: initdb's on the PATH (through
// any symlink), else the newest /usr/lib/postgresql/*/bin.
func findBin() (string, error) {
	var dirs []string
	if p, err := exec.LookPath("initdb"); err == nil {
		if p, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(found, func(a, b string) int { return -cmp.Compare(majorVersion(a), majorVersion(b)) })
	for _, dir := range append(dirs, found...) {
		if isFile(filepath.Join(dir, "initdb")) && isFile(filepath.Join(dir, "pg_ctl")) {
			return dir, nil
		}
	}
	return "", errors.New("no initdb and pg_ctl on the PATH or in /usr/lib/postgresql/*/bin")
}

func majorVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// serverUser is nil when this process may run PostgreSQL itself, else the postgres user's.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses root: no postgres user to run it as (%w); create one (useradd --system postgres)", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("uid of the postgres user: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("gid of the postgres user: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

func command(dir string, cred *syscall.Credential, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	// The postgres user may not enter the test's folder.
	cmd.Dir = dir
	// Its own process group: a Ctrl-C reaches the test binary, whose exit the watcher sees.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	return cmd
}

// run runs a PostgreSQL tool to its end. Its output goes to a file, not a pipe: the server
// pg_ctl starts would hold a pipe open, and reading it would never end.
func run(dir string, cred *syscall.Credential, name string, args ...string) error {
	out, err := os.CreateTemp(dir, filepath.Base(name)+"-*.log")
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := command(dir, cred, name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(out.Name())
		if log, _ := os.ReadFile(filepath.Join(dir, "server.log")); len(log) > 0 {
			b = append(b, log...)
		}
		return fmt.Errorf("%s %s: %w\n%s", filepath.Base(name), args[0], err, strings.TrimSpace(string(b)))
	}
	return nil
}

func startWatcher(dir string, cred *syscall.Credential, pgCtl, data string) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := command(dir, cred, "/bin/sh", "-c", watcher, pgCtl, data, dir)
	cmd.Stdin = r
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("starting the watcher that stops PostgreSQL: %w", err)
	}
	watcherStdin = w
	go cmd.Wait() // reaps the watcher, should it end early
	return nil
}

func writeOwned(path, content string, cred *syscall.Credential) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return err
	}
	if cred != nil {
		return os.Chown(path, int(cred.Uid), int(cred.Gid))
	}
	return nil
}

func appendFile(path, content string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
