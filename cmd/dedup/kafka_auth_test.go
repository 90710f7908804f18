package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/streamdedup/dedup/kafka/kafkatest"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// selfSigned returns a TLS certificate for 127.0.0.1 and its PEM.
func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kfake"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestKafkaTLSAndSASL runs `dedup kafka` against brokers that require
// SASL PLAIN, SASL SCRAM-SHA-256, or TLS with a private CA: with the
// right flags it joins and makes its partitions ready; with a wrong
// password it never does.
func TestKafkaTLSAndSASL(t *testing.T) {
	dir := t.TempDir()
	bin := buildBinary(t, dir)
	cert, caPEM := selfSigned(t)
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		cluster []kfake.Opt
		flags   []string
		pass    string
		ready   bool
	}{
		{"plain", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("PLAIN", "u1", "secret")}, []string{"--sasl-mechanism", "plain", "--sasl-user", "u1"}, "secret", true},
		{"scram-sha-256", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "u2", "secret2")}, []string{"--sasl-mechanism", "scram-sha-256", "--sasl-user", "u2"}, "secret2", true},
		{"scram-wrong-password", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "u2", "secret2")}, []string{"--sasl-mechanism", "scram-sha-256", "--sasl-user", "u2"}, "wrong", false},
		{"tls", []kfake.Opt{kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}})}, []string{"--tls-ca", ca}, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := kafkatest.NewCluster(t, 2, tc.cluster...)
			t.Setenv(kafkaAuthEnv, tc.pass)
			k := startKafka(t, bin, c.ListenAddrs(), filepath.Join(dir, tc.name), "a", tc.flags...)
			deadline := time.Now().Add(20 * time.Second)
			if !tc.ready {
				deadline = time.Now().Add(3 * time.Second)
			}
			for strings.Count(k.output(), " ready") < 2 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if got := strings.Count(k.output(), " ready") >= 2; got != tc.ready {
				t.Errorf("partitions ready: %v, want %v\n%s", got, tc.ready, k.output())
			}
			k.term(t)
		})
	}
}

// TestKafkaAuthFlags: incomplete TLS or SASL settings are usage errors
// naming what is missing.
func TestKafkaAuthFlags(t *testing.T) {
	env := func(v string) func(string) string { return func(string) string { return v } }
	for _, tc := range []struct {
		a    kafkaAuth
		pass string
		want string
	}{
		{kafkaAuth{mechanism: "plain", user: "u"}, "", kafkaAuthEnv},
		{kafkaAuth{mechanism: "plain"}, "p", "--sasl-user"},
		{kafkaAuth{mechanism: "gssapi", user: "u"}, "p", "plain, scram-sha-256 or scram-sha-512"},
		{kafkaAuth{user: "u"}, "p", "--sasl-mechanism"},
		{kafkaAuth{certFile: "c.pem"}, "", "--tls-key"},
		{kafkaAuth{caFile: filepath.Join(t.TempDir(), "missing.pem")}, "", "--tls-ca"},
	} {
		if _, err := tc.a.opts(env(tc.pass)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error saying %s", tc.a, err, tc.want)
		}
	}
}

// TestKafkaClientConfig: --client-config settings become client options;
// an unknown key or a bad value is a usage error naming it.
func TestKafkaClientConfig(t *testing.T) {
	opts, err := parseClientConfig([]string{"client.id=dedup-1", "linger.ms=5", "compression.type=zstd", "fetch.max.bytes=1048576"})
	if err != nil || len(opts) != 4 {
		t.Fatalf("%d options, %v", len(opts), err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers("127.0.0.1:1"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if got := cl.OptValue(kgo.ClientID); got != "dedup-1" {
		t.Errorf("client.id: %v", got)
	}
	if got := cl.OptValue(kgo.ProducerLinger); got != 5*time.Millisecond {
		t.Errorf("linger.ms: %v", got)
	}
	for s, want := range map[string]string{
		"linger":                  "KEY=VALUE",
		"bogus.setting=1":         "unknown setting; known: client.id",
		"linger.ms=-1":            "linger.ms=-1",
		"compression.type=brotli": "want none, gzip",
		"fetch.max.bytes=0":       "positive",
	} {
		if _, err := parseClientConfig([]string{s}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %s", s, err, want)
		}
	}
}
