// Command burrito-controlplane runs a Kubernetes control plane in one process: embedded etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, built from the official Go modules at the
// version pinned in go.mod (see hack/pin-k8s.sh and docs/architecture.md §22).
//
// Each component reads its own flags, one per line, from a file that burrito_py/local/controlplane.py
// writes (that launcher also owns the PKI). This program owns what the components cannot share: the one
// signal handler, etcd's lifetime around the API server's, the lock on the data directory, and the order
// of start and stop. It prints "ready" on stdout once the API server answers /readyz and the controller
// manager and the scheduler run.
package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"
	genericapiserver "k8s.io/apiserver/pkg/server"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/version"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	apiserveroptions "k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmoptions "k8s.io/kubernetes/cmd/kube-controller-manager/app/options"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
)

// sourceHash is stamped by scripts/build-controlplane.sh (-ldflags -X): the hash of this module's
// sources, which the launcher compares with the checkout's to refuse a stale binary.
var sourceHash = "unknown"

func init() {
	// Three components apply logging options to the one klog: the later ones must not fail on it.
	logsapi.ReapplyHandling = logsapi.ReapplyHandlingIgnoreUnchanged
}

type settings struct {
	dataDir       string
	etcdClientURL string
	etcdPeerURL   string
	unsafeNoFsync bool
	apiserverArgs string
	kcmArgs       string
	schedulerArgs string
	readyCA       string
	readyTimeout  time.Duration
	printVersion  bool
}

func main() {
	var s settings
	flag.StringVar(&s.dataDir, "data-dir", "", "directory for etcd's data and the lock (required)")
	flag.StringVar(&s.etcdClientURL, "etcd-client-url", "http://127.0.0.1:2379", "etcd's client URL")
	flag.StringVar(&s.etcdPeerURL, "etcd-peer-url", "http://127.0.0.1:2380", "etcd's peer URL (one member)")
	flag.BoolVar(&s.unsafeNoFsync, "unsafe-no-fsync", false, "etcd skips fsync (tests: a crash of the machine may lose data)")
	flag.StringVar(&s.apiserverArgs, "apiserver-args", "", "file of kube-apiserver flags, one per line (required)")
	flag.StringVar(&s.kcmArgs, "controller-manager-args", "", "file of kube-controller-manager flags (empty: not run)")
	flag.StringVar(&s.schedulerArgs, "scheduler-args", "", "file of kube-scheduler flags (empty: not run)")
	flag.StringVar(&s.readyCA, "ready-ca", "", "CA file that verifies the API server's certificate for /readyz (required)")
	flag.DurationVar(&s.readyTimeout, "ready-timeout", 120*time.Second, "how long the API server may take to be ready")
	flag.BoolVar(&s.printVersion, "version", false, "print the Kubernetes version and source hash, then exit")
	flag.Parse()
	if s.printVersion {
		fmt.Printf("%s %s\n", version.Get().GitVersion, sourceHash)
		return
	}
	if err := run(s); err != nil {
		// One line, prefixed, on stderr: the launcher shows the last line of stderr as the cause.
		fmt.Fprintf(os.Stderr, "controlplane: %v\n", err)
		os.Exit(1)
	}
}

func run(s settings) error {
	if s.dataDir == "" || s.apiserverArgs == "" || s.readyCA == "" {
		return errors.New("--data-dir, --apiserver-args and --ready-ca are required")
	}
	started := time.Now()
	if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
		return err
	}
	unlock, err := lockDataDir(s.dataDir)
	if err != nil {
		return err
	}
	defer unlock()

	// The one signal handler of the process (a second SIGTERM/SIGINT exits at once). The components are
	// built from their options, never from their cobra commands: those install handlers of their own.
	ctx := genericapiserver.SetupSignalContext()

	apiArgs, err := readArgs(s.apiserverArgs)
	if err != nil {
		return err
	}
	api := apiserveroptions.NewServerRunOptions()
	apiFlags := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, fs := range api.Flags().FlagSets {
		apiFlags.AddFlagSet(fs)
	}
	if err := apiFlags.Parse(apiArgs); err != nil {
		return fmt.Errorf("kube-apiserver flags in %s: %w", s.apiserverArgs, err)
	}
	// Listen before anything starts, so a port in use is one clear line rather than a failure deep in a
	// component; the API server takes this very listener.
	apiAddr := net.JoinHostPort(api.SecureServing.BindAddress.String(), strconv.Itoa(api.SecureServing.BindPort))
	if api.SecureServing.Listener, err = listen(apiAddr, "kube-apiserver"); err != nil {
		return err
	}
	for name, raw := range map[string]string{"etcd client": s.etcdClientURL, "etcd peer": s.etcdPeerURL} {
		if err := portFree(raw, name); err != nil {
			return err
		}
	}

	etcd, err := startEtcd(ctx, s)
	if err != nil {
		return err
	}
	defer etcd.Close()

	if err := api.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	featureGate := api.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor("kube")
	if err := logsapi.ValidateAndApply(api.Logs, featureGate); err != nil {
		return fmt.Errorf("kube-apiserver logging: %w", err)
	}
	completed, err := api.Complete(ctx)
	if err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return fmt.Errorf("kube-apiserver flags: %v", errors.Join(errs...))
	}

	// Each component reports how it ended; the first to end stops the others.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	apiDone := make(chan error, 1)
	go func() { apiDone <- apiserverapp.Run(ctx, completed) }()

	readyURL := "https://" + apiAddr + "/readyz"
	if err := waitReady(ctx, readyURL, s.readyCA, s.readyTimeout, apiDone, etcd); err != nil {
		cancel(err)
		<-apiDone
		return err
	}

	others := make(chan error, 2)
	running := 0
	if s.kcmArgs != "" {
		if err := startControllerManager(ctx, s.kcmArgs, others); err != nil {
			cancel(err)
			<-apiDone
			return err
		}
		running++
	}
	if s.schedulerArgs != "" {
		if err := startScheduler(ctx, s.schedulerArgs, others); err != nil {
			cancel(err)
			<-apiDone
			return err
		}
		running++
	}
	fmt.Printf("ready %s %.2fs\n", version.Get().GitVersion, time.Since(started).Seconds())

	var failure error
	select {
	case <-ctx.Done(): // SIGTERM/SIGINT
	case err := <-apiDone:
		apiDone <- err
		failure = fmt.Errorf("kube-apiserver stopped: %v", err)
	case err := <-others:
		running--
		failure = err
	case err := <-etcd.Err():
		failure = fmt.Errorf("etcd stopped: %v", err)
	}
	cancel(failure)
	// The API server drains its requests and closes its watches before etcd goes.
	if err := <-apiDone; err != nil && failure == nil {
		failure = fmt.Errorf("kube-apiserver: %v", err)
	}
	for ; running > 0; running-- {
		select {
		case <-others:
		case <-time.After(10 * time.Second):
			running = 0
		}
	}
	return failure
}

// lockDataDir takes an exclusive lock on the data directory, so two control planes never share etcd's
// files, and notes a directory left by a run that was killed (etcd replays its write-ahead log).
func lockDataDir(dir string) (func(), error) {
	path := filepath.Join(dir, "lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		owner, _ := os.ReadFile(path)
		f.Close()
		return nil, fmt.Errorf("data directory %s is in use by another control plane (pid %s)", dir,
			strings.TrimSpace(string(owner)))
	}
	if previous, _ := os.ReadFile(path); len(strings.TrimSpace(string(previous))) > 0 {
		fmt.Fprintf(os.Stderr, "controlplane: recovering data directory %s left by a killed run (pid %s)\n", dir,
			strings.TrimSpace(string(previous)))
	}
	if err := f.Truncate(0); err != nil {
		return nil, err
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		return nil, err
	}
	return func() {
		_ = f.Truncate(0) // a clean stop leaves no owner behind
		f.Close()
	}, nil
}

// readArgs reads "--flag=value" lines; blank lines and lines starting with # are skipped.
func readArgs(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var args []string
	for scan := bufio.NewScanner(f); scan.Scan(); {
		if line := strings.TrimSpace(scan.Text()); line != "" && !strings.HasPrefix(line, "#") {
			args = append(args, line)
		}
	}
	return args, nil
}

func listen(addr, who string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("port %s (%s) is in use", addr, who)
		}
		return nil, fmt.Errorf("cannot listen on %s (%s): %v", addr, who, err)
	}
	return l, nil
}

func portFree(raw, who string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("bad %s URL %q", who, raw)
	}
	l, err := listen(u.Host, who)
	if err != nil {
		return err
	}
	return l.Close()
}

func startEtcd(ctx context.Context, s settings) (*embed.Etcd, error) {
	client, err := url.Parse(s.etcdClientURL)
	if err != nil {
		return nil, err
	}
	peer, err := url.Parse(s.etcdPeerURL)
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "burrito"
	cfg.Dir = filepath.Join(s.dataDir, "etcd")
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = s.unsafeNoFsync
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Keep the database small over a long dev session, as kubeadm's etcd does.
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = "periodic", "5m"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("etcd could not start on %s (remove the directory to start afresh): %v", cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd: %v", err)
	case <-ctx.Done():
		e.Close()
		return nil, errors.New("stopped before etcd was ready")
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd not ready after 60s in %s", cfg.Dir)
	}
}

// waitReady polls the API server's /readyz (public to anonymous callers) until it answers 200.
func waitReady(ctx context.Context, readyURL, caFile string, timeout time.Duration, apiDone chan error,
	etcd *embed.Etcd) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("no certificate in %s", caFile)
	}
	client := &http.Client{Timeout: 2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		if resp, err := client.Get(readyURL); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		select {
		case err := <-apiDone:
			apiDone <- err
			return fmt.Errorf("kube-apiserver stopped while starting: %v", err)
		case err := <-etcd.Err():
			return fmt.Errorf("etcd stopped while the API server started: %v", err)
		case <-ctx.Done():
			return errors.New("stopped before the API server was ready")
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("kube-apiserver not ready after %s (%s: %s)", timeout, readyURL, last)
}

func startControllerManager(ctx context.Context, argsFile string, done chan<- error) error {
	args, err := readArgs(argsFile)
	if err != nil {
		return err
	}
	opts, err := kcmoptions.NewKubeControllerManagerOptions()
	if err != nil {
		return fmt.Errorf("kube-controller-manager: %w", err)
	}
	all, disabled, aliases := kcmapp.KnownControllers(), kcmapp.ControllersDisabledByDefault(), kcmapp.ControllerAliases()
	named := opts.Flags(all, disabled, aliases)
	fs := pflag.NewFlagSet("kube-controller-manager", pflag.ContinueOnError)
	for _, f := range named.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("kube-controller-manager flags in %s: %w", argsFile, err)
	}
	opts.ParsedFlags = &named
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return fmt.Errorf("kube-controller-manager: %w", err)
	}
	config, err := opts.Config(ctx, all, disabled, aliases)
	if err != nil {
		return fmt.Errorf("kube-controller-manager: %w", err)
	}
	go func() {
		err := kcmapp.Run(ctx, config.Complete())
		if ctx.Err() == nil {
			err = fmt.Errorf("kube-controller-manager stopped: %v", err)
		}
		done <- err
	}()
	return nil
}

func startScheduler(ctx context.Context, argsFile string, done chan<- error) error {
	args, err := readArgs(argsFile)
	if err != nil {
		return err
	}
	opts := scheduleroptions.NewOptions()
	fs := pflag.NewFlagSet("kube-scheduler", pflag.ContinueOnError)
	for _, f := range opts.Flags.FlagSets {
		fs.AddFlagSet(f)
	}
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("kube-scheduler flags in %s: %w", argsFile, err)
	}
	if err := opts.ComponentGlobalsRegistry.Set(); err != nil {
		return fmt.Errorf("kube-scheduler: %w", err)
	}
	cc, sched, err := schedulerapp.Setup(ctx, opts)
	if err != nil {
		return fmt.Errorf("kube-scheduler: %w", err)
	}
	go func() {
		err := schedulerapp.Run(ctx, cc, sched)
		if ctx.Err() == nil {
			err = fmt.Errorf("kube-scheduler stopped: %v", err)
		}
		done <- err
	}()
	return nil
}
