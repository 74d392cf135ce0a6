package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/pulumi/pulumi/sdk/v3/go/common/resource/plugin"
	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
)

func TestValidateHost(t *testing.T) {
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"10.20.0.11", true},
		{"::1", true},
		{"fd00:20::11", true},
		{"gpu-a.example.internal", true},
		{"gpu-a", true},
		{"-oProxyCommand=touch /tmp/x", false},
		{"-oProxyCommand=x", false},
		{"-gpu", false},
		{"gpu-.example", false},
		{"a b", false},
		{"host\n", false},
		{"host\x00", false},
		{"10.0.0.1:22", false},
		{"root@h", false},
		{"[::1]", false},
		{"fe80::1%eth0", false},
		{"a..b", false},
		{"", false},
		{strings.Repeat("a.", 127) + "ab", false}, // 256 characters
	} {
		err := validateHost(tc.host)
		if (err == nil) != tc.ok {
			t.Errorf("validateHost(%q) = %v, want ok=%v", tc.host, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "connection.host") {
			t.Errorf("validateHost(%q): error %q does not name the field", tc.host, err)
		}
	}
	err := validateHost("-oProxyCommand=x")
	if err == nil || err.Error() != `connection.host "-oProxyCommand=x": not an IP address or DNS name` {
		t.Errorf("error text: %v", err)
	}
}

func TestValidateUser(t *testing.T) {
	for _, tc := range []struct {
		user string
		ok   bool
	}{
		{"root", true},
		{"ubuntu", true},
		{"_svc", true},
		{"deploy-1", true},
		{"-oProxyCommand=touch /tmp/x", false},
		{"a b", false},
		{"root\n", false},
		{"root@h", false},
		{"root:x", false},
		{"Root", false},
		{"1user", false},
		{strings.Repeat("a", 33), false},
	} {
		err := validateUser(tc.user)
		if (err == nil) != tc.ok {
			t.Errorf("validateUser(%q) = %v, want ok=%v", tc.user, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "connection.user") {
			t.Errorf("validateUser(%q): error %q does not name the field", tc.user, err)
		}
	}
}

func TestValidateHostKey(t *testing.T) {
	ed := authorizedKey(t, newSigner(t).PublicKey())
	blob := strings.Fields(ed)[1]
	for _, tc := range []struct {
		name, key string
		ok        bool
	}{
		{"ed25519", ed, true},
		{"trailing newline", ed + "\n", false},
		{"embedded newline", "ssh-ed25519 " + blob + "\n[evil]:22 " + ed, false},
		{"comment", ed + " root@gpu-a", false},
		{"host name first", "gpu-a " + ed, false},
		{"unknown type", "ssh-dss " + blob, false},
		{"type mismatch", "ecdsa-sha2-nistp256 " + blob, false},
		{"not base64", "ssh-ed25519 not*base64", false},
		{"not a key", "ssh-ed25519 aGVsbG8=", false},
		{"option", "-oProxyCommand=x", false},
		{"double space", "ssh-ed25519  " + blob, false},
	} {
		err := validateHostKey(tc.key)
		if (err == nil) != tc.ok {
			t.Errorf("%s: validateHostKey(%q) = %v, want ok=%v", tc.name, tc.key, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "connection.host_key") {
			t.Errorf("%s: error %q does not name the field", tc.name, err)
		}
	}
}

func TestValidateConnection(t *testing.T) {
	key := authorizedKey(t, newSigner(t).PublicKey())
	good := map[string]string{"host": "10.20.0.11", "port": "22", "user": "root", "host_key": key}
	if errs := validateConnection(good, nil); len(errs) != 0 {
		t.Fatalf("good connection: %v", errs)
	}
	withFile := map[string]string{"host": "gpu-a.example.internal", "known_hosts_file": "/etc/fleet/known_hosts"}
	if errs := validateConnection(withFile, nil); len(errs) != 0 {
		t.Fatalf("known_hosts_file connection: %v", errs)
	}
	noPin := map[string]string{"host": "10.20.0.11"}
	if errs := validateConnection(noPin, nil); len(errs) != 1 || errs[0] != errHostKeyRequired {
		t.Fatalf("no host key: %v, want %v", errs, errHostKeyRequired)
	}
	// Unknown (computed) fields are left for run time.
	unknown := map[string]bool{"host": true, "host_key": true}
	if errs := validateConnection(map[string]string{}, unknown); len(errs) != 0 {
		t.Fatalf("unknown fields: %v", errs)
	}
	for field, value := range map[string]string{
		"port": "0", "known_hosts_file": "/a b", "private_key": "not a key", "user": "-oProxyCommand=x",
	} {
		c := map[string]string{"host": "10.20.0.11", "host_key": key, field: value}
		errs := validateConnection(c, nil)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "connection."+field) {
			t.Errorf("%s=%q: %v", field, value, errs)
		}
	}
}

func TestSSHArgs(t *testing.T) {
	for _, tc := range []struct {
		host, dest string
	}{
		{"10.20.0.11", "root@10.20.0.11"},
		{"::1", "root@::1"},
		{"gpu-a.example.internal", "root@gpu-a.example.internal"},
	} {
		target := sshTarget{host: tc.host, user: "root", port: 2222}
		args := sshArgs(target, "/tmp/d/known_hosts", "/tmp/d/agent.sock", true)
		n := len(args)
		if n < 3 || args[n-3] != "--" || args[n-2] != tc.dest || args[n-1] != "sh -s" {
			t.Fatalf("argv must end with -- %s \"sh -s\": %q", tc.dest, args)
		}
		if i := index(args, "--"); i != n-3 {
			t.Fatalf("-- at %d, want only right before the destination: %q", i, args)
		}
		joined := strings.Join(args, " ")
		for _, want := range []string{
			"-p 2222", "StrictHostKeyChecking=yes", "BatchMode=yes", "GlobalKnownHostsFile=/dev/null",
			"UserKnownHostsFile=/tmp/d/known_hosts", "IdentityAgent=/tmp/d/agent.sock", "IdentityFile=none",
			"KnownHostsCommand=none",
		} {
			if !strings.Contains(joined, want) {
				t.Errorf("argv lacks %q: %q", want, args)
			}
		}
	}
	// Without a private key ssh keeps its own identities.
	args := sshArgs(sshTarget{host: "h", user: "root", port: 22}, "/k", "", false)
	if strings.Contains(strings.Join(args, " "), "Identity") || strings.Contains(strings.Join(args, " "), "KnownHostsCommand") {
		t.Errorf("unexpected identity/KnownHostsCommand options: %q", args)
	}
}

func TestKnownHostsName(t *testing.T) {
	if got := knownHostsName("10.0.0.1", 22); got != "10.0.0.1" {
		t.Error(got)
	}
	if got := knownHostsName("::1", 2222); got != "[::1]:2222" {
		t.Error(got)
	}
}

func TestCheckReportsConnection(t *testing.T) {
	key := authorizedKey(t, newSigner(t).PublicKey())
	check := func(conn resource.PropertyMap) []*pulumirpc.CheckFailure {
		t.Helper()
		news, err := marshal(resource.PropertyMap{
			"create":     resource.NewStringProperty("true"),
			"connection": resource.NewObjectProperty(conn),
		})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := (&commandProvider{}).Check(context.Background(), &pulumirpc.CheckRequest{Type: remoteType, News: news})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetFailures()
	}
	failures := check(resource.PropertyMap{
		"host":     resource.NewStringProperty("-oProxyCommand=touch /tmp/x"),
		"user":     resource.NewStringProperty("root"),
		"host_key": resource.NewStringProperty(key),
	})
	if len(failures) != 1 || failures[0].Property != "connection" ||
		!strings.Contains(failures[0].Reason, `connection.host "-oProxyCommand=touch /tmp/x"`) {
		t.Fatalf("hostile host: %v", failures)
	}
	// Unknown at preview: nothing to report yet.
	failures = check(resource.PropertyMap{
		"host":     resource.MakeComputed(resource.NewStringProperty("")),
		"host_key": resource.MakeComputed(resource.NewStringProperty("")),
	})
	if len(failures) != 0 {
		t.Fatalf("computed: %v", failures)
	}
	failures = check(resource.PropertyMap{
		"host": resource.NewStringProperty("10.20.0.11"), "port": resource.NewNumberProperty(22),
		"user": resource.NewStringProperty("root"), "host_key": resource.NewStringProperty(key),
	})
	if len(failures) != 0 {
		t.Fatalf("good: %v", failures)
	}
}

// TestRunRemote drives the real ssh client against an in-process SSH server: the key comes from the
// agent (nothing but the socket and the public known_hosts line is in the private dir), the host key
// is pinned, and the dir is gone afterwards.
func TestRunRemote(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("no ssh client")
	}
	t.Setenv("TMPDIR", t.TempDir())
	hostSigner, clientSigner := newSigner(t), newSigner(t)
	var mu sync.Mutex
	var seen []string
	port := startSSHServer(t, hostSigner, clientSigner.PublicKey(), func(command string, stdin []byte) (string, uint32) {
		mu.Lock()
		defer mu.Unlock()
		dirs, _ := filepath.Glob(filepath.Join(socketBase(), "vllm-fleet-ssh-*"))
		for _, d := range dirs {
			fi, _ := os.Stat(d)
			seen = append(seen, fmt.Sprintf("%s %o", filepath.Base(d)[:len("vllm-fleet-ssh-")], fi.Mode().Perm()))
			entries, _ := os.ReadDir(d)
			for _, e := range entries {
				seen = append(seen, e.Name())
			}
		}
		return command + "\n" + string(stdin), 0
	})
	pemKey := pem.EncodeToMemory(must(ssh.MarshalPrivateKey(clientSigner.key, "")))
	conn := func(hostKey string) resource.PropertyValue {
		return resource.NewObjectProperty(resource.PropertyMap{
			"host":        resource.NewStringProperty("127.0.0.1"),
			"port":        resource.NewNumberProperty(float64(port)),
			"user":        resource.NewStringProperty("tester"),
			"private_key": resource.MakeSecret(resource.NewStringProperty(string(pemKey))),
			"host_key":    resource.NewStringProperty(hostKey),
		})
	}

	stdout, stderr, err := runRemote(context.Background(), conn(authorizedKey(t, hostSigner.PublicKey())),
		"echo hi\n", map[string]string{"FOO": "it's"}, "")
	if err != nil {
		t.Fatalf("runRemote: %v (stderr %q)", err, stderr)
	}
	if want := "sh -s\nexport FOO='it'\"'\"'s'\necho hi\n"; stdout != want {
		t.Fatalf("stdout %q, want %q", stdout, want)
	}
	got := strings.Join(seen, ",")
	if got != "vllm-fleet-ssh- 700,agent.sock,known_hosts" {
		t.Fatalf("private dir during the run: %q", got)
	}
	if left, _ := filepath.Glob(filepath.Join(socketBase(), "vllm-fleet-ssh-*")); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}

	// No private_key in the connection: the provider's own key (its sshPrivateKey config) is offered.
	noKey := resource.NewObjectProperty(resource.PropertyMap{
		"host":     resource.NewStringProperty("127.0.0.1"),
		"port":     resource.NewNumberProperty(float64(port)),
		"user":     resource.NewStringProperty("tester"),
		"host_key": resource.NewStringProperty(authorizedKey(t, hostSigner.PublicKey())),
	})
	t.Setenv("SSH_AUTH_SOCK", "")
	if _, stderr, err := runRemote(context.Background(), noKey, "true", nil, string(pemKey)); err != nil {
		t.Fatalf("provider key: %v (stderr %q)", err, stderr)
	}
	if _, _, err := runRemote(context.Background(), noKey, "true", nil, ""); err == nil {
		t.Fatal("no key at all: the server accepted a client without its key")
	}

	// Another host key: refused, no fallback.
	_, _, err = runRemote(context.Background(), conn(authorizedKey(t, newSigner(t).PublicKey())), "true", nil, "")
	if err == nil || !strings.Contains(err.Error(), "Host key verification failed") {
		t.Fatalf("a wrong pinned host key: %v", err)
	}
	// No pin at all: refused before ssh runs.
	noPin := resource.NewObjectProperty(resource.PropertyMap{
		"host": resource.NewStringProperty("127.0.0.1"), "port": resource.NewNumberProperty(float64(port)),
	})
	if _, _, err = runRemote(context.Background(), noPin, "true", nil, ""); err == nil ||
		!strings.Contains(err.Error(), "connection.host_key is required") {
		t.Fatalf("no pin: %v", err)
	}
	// A hostile host never reaches ssh.
	hostile := resource.NewObjectProperty(resource.PropertyMap{
		"host":     resource.NewStringProperty("-oProxyCommand=touch " + filepath.Join(t.TempDir(), "x")),
		"host_key": resource.NewStringProperty(authorizedKey(t, hostSigner.PublicKey())),
	})
	if _, _, err = runRemote(context.Background(), hostile, "true", nil, ""); err == nil ||
		!strings.Contains(err.Error(), "not an IP address or DNS name") {
		t.Fatalf("hostile host: %v", err)
	}
}

type privateKeyHolder struct {
	ssh.Signer
	key ed25519.PrivateKey
}

func newSigner(t *testing.T) privateKeyHolder {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return privateKeyHolder{Signer: s, key: priv}
}

func authorizedKey(t *testing.T, pub ssh.PublicKey) string {
	t.Helper()
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func index(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// startSSHServer serves exec requests on 127.0.0.1 for user "tester" with clientKey; onExec gets the
// command and all of stdin and returns stdout and the exit status.
func startSSHServer(
	t *testing.T, hostKey ssh.Signer, clientKey ssh.PublicKey, onExec func(string, []byte) (string, uint32),
) int {
	t.Helper()
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if meta.User() == "tester" && bytes.Equal(key.Marshal(), clientKey.Marshal()) {
				return nil, nil
			}
			return nil, fmt.Errorf("unknown key")
		},
	}
	cfg.AddHostKey(hostKey)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveSSH(c, cfg, onExec)
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func serveSSH(c net.Conn, cfg *ssh.ServerConfig, onExec func(string, []byte) (string, uint32)) {
	defer c.Close()
	_, chans, reqs, err := ssh.NewServerConn(c, cfg)
	if err != nil {
		return
	}
	go ssh.DiscardRequests(reqs)
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "session only")
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			return
		}
		go func() {
			for req := range chReqs {
				if req.Type != "exec" {
					if req.WantReply {
						_ = req.Reply(false, nil)
					}
					continue
				}
				var p struct{ Command string }
				if err := ssh.Unmarshal(req.Payload, &p); err != nil {
					_ = req.Reply(false, nil)
					continue
				}
				_ = req.Reply(true, nil)
				go func() {
					in, _ := io.ReadAll(ch)
					out, status := onExec(p.Command, in)
					_, _ = ch.Write([]byte(out))
					_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
					ch.Close()
				}()
			}
		}()
	}
}

// TestProviderSecrets: the secrets live in the provider's configuration; a command names the ones it
// needs (secret_environment) and gets them in its environment, while its inputs and outputs hold names.
func TestProviderSecrets(t *testing.T) {
	pemKey := string(pem.EncodeToMemory(must(ssh.MarshalPrivateKey(newSigner(t).key, ""))))
	const apiKey = "api-key-4f1c9e"
	args := func(m resource.PropertyMap) *structpb.Struct {
		s, err := plugin.MarshalProperties(m, plugin.MarshalOptions{KeepSecrets: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	p := &commandProvider{}
	_, err := p.Configure(context.Background(), &pulumirpc.ConfigureRequest{Args: args(resource.PropertyMap{
		"sshPrivateKey": resource.MakeSecret(resource.NewStringProperty(pemKey)),
		"apiKey":        resource.MakeSecret(resource.NewStringProperty(apiKey)),
		"version":       resource.NewStringProperty("0.1.0"),
	})})
	if err != nil {
		t.Fatal(err)
	}
	news, err := marshal(resource.PropertyMap{
		// The key's hash, not the key, in the command: the test then finds the key in no output.
		"create": resource.NewStringProperty(`test "$(printf %s "$API" | sha256sum | cut -c1-64)" = "` +
			fmt.Sprintf("%x", sha256.Sum256([]byte(apiKey))) + `" && test -z "$MISSING" && echo match`),
		"environment":        resource.NewObjectProperty(resource.PropertyMap{"PLAIN": resource.NewStringProperty("x")}),
		"secret_environment": resource.NewObjectProperty(resource.PropertyMap{"API": resource.NewStringProperty("apiKey"), "MISSING": resource.NewStringProperty("notConfigured")}),
	})
	if err != nil {
		t.Fatal(err)
	}
	check, err := p.Check(context.Background(), &pulumirpc.CheckRequest{Type: localType, News: news})
	if err != nil || len(check.GetFailures()) != 0 {
		t.Fatalf("check: %v %v", err, check.GetFailures())
	}
	created, err := p.Create(context.Background(), &pulumirpc.CreateRequest{Type: localType, Properties: news})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	outs := created.GetProperties().String()
	if !strings.Contains(outs, "match") || strings.Contains(outs, apiKey) || strings.Contains(outs, "PRIVATE KEY") {
		t.Fatalf("outputs: %s", outs)
	}

	// The outputs are stdout and stderr only: no input (no secret among them) is echoed into them; the
	// engine keeps the inputs and sends them back to Update and Delete.
	deleted := filepath.Join(t.TempDir(), "deleted")
	withSecret, err := plugin.MarshalProperties(resource.PropertyMap{
		"create": resource.NewStringProperty("echo created"),
		"delete": resource.NewStringProperty(`test "$TOKEN" = token-9b1d && touch ` + deleted),
		"environment": resource.NewObjectProperty(resource.PropertyMap{
			"TOKEN": resource.MakeSecret(resource.NewStringProperty("token-9b1d")),
		}),
	}, plugin.MarshalOptions{KeepSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	created, err = p.Create(context.Background(), &pulumirpc.CreateRequest{Type: localType, Properties: withSecret})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	back, err := plugin.UnmarshalProperties(created.GetProperties(), plugin.MarshalOptions{KeepSecrets: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || back["stdout"].StringValue() != "created\n" || strings.Contains(created.GetProperties().String(), "token-9b1d") {
		t.Fatalf("outputs: %v", back)
	}
	// Only `delete` changed: nothing runs, the last stdout is kept; the old inputs, not the outputs, are compared.
	changedDelete, _ := plugin.MarshalProperties(resource.PropertyMap{
		"create":      resource.NewStringProperty("echo created"),
		"delete":      resource.NewStringProperty("true"),
		"environment": resource.NewObjectProperty(resource.PropertyMap{"TOKEN": resource.MakeSecret(resource.NewStringProperty("token-9b1d"))}),
	}, plugin.MarshalOptions{KeepSecrets: true})
	diff, err := p.Diff(context.Background(), &pulumirpc.DiffRequest{Olds: created.GetProperties(), OldInputs: withSecret, News: changedDelete})
	if err != nil || len(diff.GetReplaces()) != 0 || strings.Join(diff.GetDiffs(), ",") != "delete" {
		t.Fatalf("diff against the old inputs: %v %v", diff, err)
	}
	updated, err := p.Update(context.Background(), &pulumirpc.UpdateRequest{
		Type: localType, Olds: created.GetProperties(), OldInputs: withSecret, News: changedDelete,
	})
	if err != nil {
		t.Fatal(err)
	}
	if back, _ = plugin.UnmarshalProperties(updated.GetProperties(), plugin.MarshalOptions{}); back["stdout"].StringValue() != "created\n" {
		t.Fatalf("update kept: %v", back)
	}
	// Delete runs the old inputs' delete command with their environment (not the outputs, which hold neither).
	if _, err := p.Delete(context.Background(), &pulumirpc.DeleteRequest{
		Type: localType, Properties: created.GetProperties(), OldInputs: withSecret,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(deleted); err != nil {
		t.Fatalf("the delete command did not run with the old inputs' environment: %v", err)
	}

	// A rotated key updates the provider in place; nothing asks for a replacement.
	olds := args(resource.PropertyMap{"apiKey": resource.MakeSecret(resource.NewStringProperty(apiKey))})
	for rotated, want := range map[string]pulumirpc.DiffResponse_DiffChanges{
		apiKey: pulumirpc.DiffResponse_DIFF_NONE, "rotated": pulumirpc.DiffResponse_DIFF_SOME,
	} {
		newsCfg := args(resource.PropertyMap{"apiKey": resource.MakeSecret(resource.NewStringProperty(rotated))})
		diff, err := p.DiffConfig(context.Background(), &pulumirpc.DiffRequest{OldInputs: olds, News: newsCfg})
		if err != nil || diff.GetChanges() != want || len(diff.GetReplaces()) != 0 {
			t.Fatalf("DiffConfig(%q): %v %v", rotated, diff, err)
		}
	}

	// A key that does not parse is refused at Configure, without quoting it.
	_, err = p.Configure(context.Background(), &pulumirpc.ConfigureRequest{Args: args(resource.PropertyMap{
		"sshPrivateKey": resource.MakeSecret(resource.NewStringProperty("not-a-key-7d2e")),
	})})
	if err == nil || !strings.Contains(err.Error(), "sshPrivateKey") || strings.Contains(err.Error(), "not-a-key-7d2e") {
		t.Fatalf("bad key: %v", err)
	}

	// Names only: a value that is not a config key name, or a bad variable name, is refused by Check.
	bad, _ := marshal(resource.PropertyMap{
		"create": resource.NewStringProperty("true"),
		"secret_environment": resource.NewObjectProperty(resource.PropertyMap{
			"A=B": resource.NewStringProperty("apiKey"), "OK": resource.NewNumberProperty(1),
		}),
	})
	check, err = p.Check(context.Background(), &pulumirpc.CheckRequest{Type: localType, News: bad})
	if err != nil || len(check.GetFailures()) != 2 {
		t.Fatalf("bad secret_environment: %v %v", err, check.GetFailures())
	}
}

// TestRunRemoteSDKConnection: the connection as pulumi-command's SDK sends it (camelCase): privateKey
// and hostKey, or an agent of the caller's (agentSocketPath); the host key is pinned whatever the
// shape, and what this provider does not implement (password, proxy) is refused, never ignored.
func TestRunRemoteSDKConnection(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("no ssh client")
	}
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("SSH_AUTH_SOCK", "")
	hostSigner, clientSigner := newSigner(t), newSigner(t)
	port := startSSHServer(t, hostSigner, clientSigner.PublicKey(), func(command string, stdin []byte) (string, uint32) {
		return "ran " + command, 0
	})
	pemKey := string(pem.EncodeToMemory(must(ssh.MarshalPrivateKey(clientSigner.key, ""))))
	pin := authorizedKey(t, hostSigner.PublicKey())
	conn := func(extra map[string]any) resource.PropertyValue {
		m := map[string]any{"host": "127.0.0.1", "port": float64(port), "user": "tester"}
		for k, v := range extra {
			m[k] = v
		}
		return resource.NewObjectProperty(resource.NewPropertyMapFromMap(m))
	}
	if out, stderr, err := runRemote(context.Background(), conn(map[string]any{"privateKey": pemKey, "hostKey": pin}),
		"true", nil, ""); err != nil || out != "ran sh -s" {
		t.Fatalf("privateKey + hostKey: %q, %v (stderr %q)", out, err, stderr)
	}
	// The caller's agent: a socket path in the inputs, the key never.
	sock := filepath.Join(t.TempDir(), "agent.sock")
	stop, err := serveKey(sock, clientSigner.key)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if out, stderr, err := runRemote(context.Background(), conn(map[string]any{"agentSocketPath": sock, "hostKey": pin}),
		"true", nil, ""); err != nil || out != "ran sh -s" {
		t.Fatalf("agentSocketPath: %q, %v (stderr %q)", out, err, stderr)
	}
	// The pin holds with the agent too: another host key is refused.
	other := authorizedKey(t, newSigner(t).PublicKey())
	if _, _, err := runRemote(context.Background(), conn(map[string]any{"agentSocketPath": sock, "hostKey": other}),
		"true", nil, ""); err == nil || !strings.Contains(err.Error(), "Host key verification failed") {
		t.Fatalf("wrong hostKey: %v", err)
	}
	// pulumi-command ignores the host key when none is given; this provider refuses to connect.
	if _, _, err := runRemote(context.Background(), conn(map[string]any{"agentSocketPath": sock}),
		"true", nil, ""); err == nil || !strings.Contains(err.Error(), "connection.host_key is required") {
		t.Fatalf("no hostKey: %v", err)
	}
	for field, value := range map[string]any{
		"password": "pw", "privateKeyPassword": "pw", "proxy": map[string]any{"host": "10.0.0.9"},
	} {
		_, _, err := runRemote(context.Background(), conn(map[string]any{"hostKey": pin, field: value}), "true", nil, pemKey)
		if err == nil || !strings.Contains(err.Error(), "connection."+field+" is not supported") {
			t.Errorf("%s: %v", field, err)
		}
	}
}

// TestCheckSDKConnection: Check reads the SDK's camelCase connection, as the engine sends it at preview.
func TestCheckSDKConnection(t *testing.T) {
	pin := authorizedKey(t, newSigner(t).PublicKey())
	check := func(conn map[string]any) []*pulumirpc.CheckFailure {
		t.Helper()
		news := must(marshal(resource.NewPropertyMapFromMap(map[string]any{"create": "true", "connection": conn})))
		resp, err := (&commandProvider{pkg: upstreamPkg}).Check(context.Background(),
			&pulumirpc.CheckRequest{Type: "command:remote:Command", News: news})
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetFailures()
	}
	if f := check(map[string]any{"host": "10.20.0.11", "hostKey": pin, "agentSocketPath": "/run/a.sock"}); len(f) != 0 {
		t.Fatalf("good: %v", f)
	}
	f := check(map[string]any{"host": "10.20.0.11", "agentSocketPath": "/run/a b"})
	if len(f) != 2 || !strings.Contains(f[0].Reason+f[1].Reason, "host_key is required") ||
		!strings.Contains(f[0].Reason+f[1].Reason, "connection.agentSocketPath") {
		t.Fatalf("no pin, bad socket path: %v", f)
	}
}
