// Command gencert writes a certificate authority and a server certificate for the NATS
// servers of deploy/: ca.pem (what clients trust), server.pem and server-key.pem (what every
// node presents to clients and, for the cluster's routes, to the other nodes).
//
// The files committed in deploy/nats/tls were made by it and are for tests and trials only:
// their key is public. For production, make your own (with this command, -hosts naming your
// servers, or your own PKI) and keep the keys out of the repository.
//
//	go run ./deploy/gencert -dir deploy/nats/tls -hosts localhost,127.0.0.1,nats.example.com
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// hosts are the names the deploy/ configurations give the NATS servers: loopback, the
// compose services, and the Kubernetes services and pods in the namespace cairn.
const hosts = "localhost,127.0.0.1,::1,nats,nats-1,nats-2,nats-3,*.nats," +
	"nats.cairn.svc,*.nats.cairn.svc,nats.cairn.svc.cluster.local,*.nats.cairn.svc.cluster.local"

func main() {
	dir := flag.String("dir", "deploy/nats/tls", "where to write ca.pem, server.pem and server-key.pem")
	names := flag.String("hosts", hosts, "comma-separated DNS names and IP addresses of the servers")
	days := flag.Int("days", 3650, "validity in days")
	flag.Parse()
	if err := run(*dir, strings.Split(*names, ","), time.Duration(*days)*24*time.Hour); err != nil {
		fmt.Fprintln(os.Stderr, "gencert:", err)
		os.Exit(1)
	}
}

func run(dir string, names []string, valid time.Duration) error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	ca := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "Cairn NATS test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(valid),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("signing the CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	leaf := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(valid),
		KeyUsage: x509.KeyUsageDigitalSignature,
		// Routes verify each other: every node is a TLS client of the others too.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(strings.TrimSpace(n)); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else if n = strings.TrimSpace(n); n != "" {
			leaf.DNSNames = append(leaf.DNSNames, n)
		}
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("signing the server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name, typ string
		der       []byte
		mode      os.FileMode
	}{
		{"ca.pem", "CERTIFICATE", caDER, 0o644},
		{"server.pem", "CERTIFICATE", leafDER, 0o644},
		{"server-key.pem", "PRIVATE KEY", keyDER, 0o600},
	} {
		b := pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der})
		if err := os.WriteFile(filepath.Join(dir, f.name), b, f.mode); err != nil {
			return err
		}
	}
	return nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic("gencert: no randomness: " + err.Error())
	}
	return n
}
