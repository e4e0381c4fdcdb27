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
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/server/v3/embed"
	genericapiserver "k8s.io/apiserver/pkg/server"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
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
	// run has a goroutine of its own: should a component ask to exit from it while stopping, guardExits
	// ends that goroutine (its deferred stops run) and this one still reports and exits.
	done := make(chan error, 1)
	goReport(func() error { return run(s) }, done)
	if err := <-done; err != nil {
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
	signalled := genericapiserver.SetupSignalContext()
	stopping := guardExits(signalled)

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

	etcd, err := startEtcd(signalled, s)
	if err != nil {
		return unlessSignalled(signalled, err)
	}
	defer etcd.Close()

	// Stop order: the controller manager and the scheduler, then the API server, then etcd (deferred).
	// Each has a context of its own: the signal reaches the components at once, the API server only once
	// they have stopped, since a controller manager still starting its controllers without an API server
	// to call exits the process (its client builder's klog.Fatal).
	apiCtx, stopAPI := context.WithCancel(context.Background())
	defer stopAPI()
	componentsCtx, stopComponents := context.WithCancel(signalled)
	defer stopComponents()

	if err := api.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	featureGate := api.GenericServerRunOptions.ComponentGlobalsRegistry.FeatureGateFor("kube")
	if err := logsapi.ValidateAndApply(api.Logs, featureGate); err != nil {
		return fmt.Errorf("kube-apiserver logging: %w", err)
	}
	completed, err := api.Complete(apiCtx)
	if err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return fmt.Errorf("kube-apiserver flags: %v", errors.Join(errs...))
	}

	apiDone := make(chan error, 1)
	goReport(func() error { return apiserverapp.Run(apiCtx, completed) }, apiDone)
	others := make(chan error, 2)
	running := 0
	// stop ends whatever has started, in order, and returns the run's outcome: nil after a signal when
	// everything stopped (a requested stop is a clean one), else the first failure.
	stop := func(failure error) error {
		stopping.Store(true)
		stopComponents()
		deadline := time.After(componentStopTimeout)
		for ; running > 0; running-- {
			select {
			case <-others:
			case <-deadline:
				fmt.Fprintf(os.Stderr, "controlplane: the controller manager or the scheduler still ran %s after "+
					"the stop began; stopping the API server anyway\n", componentStopTimeout)
				running = 0
			}
		}
		stopAPI()
		// The API server drains its requests and closes its watches before etcd goes.
		if err := <-apiDone; err != nil && failure == nil {
			failure = fmt.Errorf("kube-apiserver: %v", err)
		}
		return unlessSignalled(signalled, failure)
	}

	readyURL := "https://" + apiAddr + "/readyz"
	if err := waitReady(signalled, readyURL, s.readyCA, s.readyTimeout, apiDone, etcd); err != nil {
		return stop(err)
	}
	if s.kcmArgs != "" {
		if err := startControllerManager(componentsCtx, s.kcmArgs, others); err != nil {
			return stop(err)
		}
		running++
	}
	if s.schedulerArgs != "" {
		if err := startScheduler(componentsCtx, s.schedulerArgs, others); err != nil {
			return stop(err)
		}
		running++
	}
	fmt.Printf("ready %s %.2fs\n", version.Get().GitVersion, time.Since(started).Seconds())

	var failure error
	select {
	case <-signalled.Done(): // SIGTERM/SIGINT
	case err := <-apiDone:
		apiDone <- err
		failure = fmt.Errorf("kube-apiserver stopped: %v", err)
	case err := <-others:
		running--
		failure = err
	case err := <-etcd.Err():
		failure = fmt.Errorf("etcd stopped: %v", err)
	}
	return stop(failure)
}

// componentStopTimeout bounds the wait for the controller manager and the scheduler before the API
// server stops: the controller manager gives its controllers 10 s (--controller-shutdown-timeout).
const componentStopTimeout = 10 * time.Second

// unlessSignalled: after SIGTERM/SIGINT, a component that ended on its way down is part of the requested
// stop, not a failure of the run.
func unlessSignalled(signalled context.Context, err error) error {
	if signalled.Err() != nil {
		return nil
	}
	return err
}

// guardExits keeps the components' own exits (klog.Fatal, klog.FlushAndExit: both end in klog.OsExit)
// from ending the process once its stop has begun: a component that loses its API server on the way
// down would otherwise exit 255 before etcd closed its files and the lock was released. Such an exit
// ends only the goroutine that asked for it (its deferred calls run, so locks and wait groups are
// released); before the stop, exits are the components' own, as upstream. The stop begins with a
// signal or when run calls stop (the returned flag).
func guardExits(signalled context.Context) *atomic.Bool {
	var stopping atomic.Bool
	go func() {
		<-signalled.Done()
		stopping.Store(true)
	}()
	exit := klog.OsExit
	klog.OsExit = func(code int) {
		if !stopping.Load() {
			exit(code)
			return
		}
		fmt.Fprintf(os.Stderr, "controlplane: a component asked to exit with code %d while stopping; "+
			"its goroutine ends instead and the stop goes on\n", code)
		runtime.Goexit()
	}
	return &stopping
}

// goReport runs fn in a goroutine and sends its result on done, also when that goroutine is ended by
// guardExits (then with an error saying so), so that nobody waits for a result that never comes.
func goReport(fn func() error, done chan<- error) {
	go func() {
		returned := false
		defer func() {
			if !returned {
				done <- errors.New("ended by an exit while stopping")
			}
		}()
		err := fn()
		returned = true
		done <- err
	}()
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
	completed := config.Complete()
	if completed.ComponentConfig.Generic.LeaderElection.LeaderElect {
		return errors.New(leaderElectionRefused("kube-controller-manager"))
	}
	goReport(func() error {
		err := kcmapp.Run(ctx, completed)
		if ctx.Err() == nil {
			err = fmt.Errorf("kube-controller-manager stopped: %v", err)
		}
		return err
	}, done)
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
	if cc.LeaderElection != nil {
		return errors.New(leaderElectionRefused("kube-scheduler"))
	}
	goReport(func() error {
		err := schedulerapp.Run(ctx, cc, sched)
		if ctx.Err() == nil {
			err = fmt.Errorf("kube-scheduler stopped: %v", err)
		}
		return err
	}, done)
	return nil
}

// leaderElectionRefused: one control plane holds a data directory (its lock), so there is no other
// instance to elect against; and on the way down the scheduler's leader election calls os.Exit itself
// (OnStoppedLeading), which no guard catches, before the API server has drained and etcd has closed.
func leaderElectionRefused(component string) string {
	return component + ": leader election is not supported here (set --leader-elect=false): one control " +
		"plane runs per data directory, and a component's leader election exits the process when it stops"
}
