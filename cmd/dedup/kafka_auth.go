package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// kafkaAuthEnv holds the SASL password: a flag's value would show in the
// process list.
const kafkaAuthEnv = "DEDUP_KAFKA_SASL_PASSWORD"

// kafkaAuth holds the TLS and SASL flags of `dedup kafka`.
type kafkaAuth struct {
	tls                   bool
	caFile, certFile, key string
	serverName            string
	mechanism, user       string
}

func (a *kafkaAuth) register(fs *flag.FlagSet) {
	fs.BoolVar(&a.tls, "tls", false, "connect to the brokers with TLS, verified against the system's roots (or --tls-ca)")
	fs.StringVar(&a.caFile, "tls-ca", "", "verify the brokers against the CA certificates in PEM `FILE` (implies --tls)")
	fs.StringVar(&a.certFile, "tls-cert", "", "client certificate, PEM `FILE` (with --tls-key; implies --tls)")
	fs.StringVar(&a.key, "tls-key", "", "client private key, PEM `FILE`")
	fs.StringVar(&a.serverName, "tls-server-name", "", "expect this `NAME` in the brokers' certificates (default: the broker's host)")
	fs.StringVar(&a.mechanism, "sasl-mechanism", "", "SASL `MECHANISM`: plain, scram-sha-256 or scram-sha-512 (password in $"+kafkaAuthEnv+")")
	fs.StringVar(&a.user, "sasl-user", "", "SASL `USER`")
}

// opts returns the client options the flags say; getenv reads the
// password.
func (a *kafkaAuth) opts(getenv func(string) string) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if a.tls || a.caFile != "" || a.certFile != "" || a.key != "" || a.serverName != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: a.serverName}
		if a.caFile != "" {
			pem, err := os.ReadFile(a.caFile)
			if err != nil {
				return nil, fmt.Errorf("kafka: --tls-ca: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("kafka: --tls-ca %s: no PEM certificate in it", a.caFile)
			}
		}
		if (a.certFile == "") != (a.key == "") {
			return nil, usagef("kafka: --tls-cert and --tls-key go together")
		}
		if a.certFile != "" {
			cert, err := tls.LoadX509KeyPair(a.certFile, a.key)
			if err != nil {
				return nil, fmt.Errorf("kafka: --tls-cert/--tls-key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	if a.mechanism == "" {
		if a.user != "" {
			return nil, usagef("kafka: --sasl-user needs --sasl-mechanism")
		}
		return opts, nil
	}
	pass := getenv(kafkaAuthEnv)
	if a.user == "" || pass == "" {
		return nil, usagef("kafka: --sasl-mechanism %s needs --sasl-user and the password in $%s", a.mechanism, kafkaAuthEnv)
	}
	switch a.mechanism {
	case "plain":
		opts = append(opts, kgo.SASL(plain.Auth{User: a.user, Pass: pass}.AsMechanism()))
	case "scram-sha-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: a.user, Pass: pass}.AsSha256Mechanism()))
	case "scram-sha-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: a.user, Pass: pass}.AsSha512Mechanism()))
	default:
		return nil, usagef("kafka: --sasl-mechanism must be plain, scram-sha-256 or scram-sha-512, got %q", a.mechanism)
	}
	return opts, nil
}
