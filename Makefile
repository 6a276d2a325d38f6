# pykubelet: `make run` starts a standalone node on manifests/; `make test` runs every test.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: setup vm-setup venv control-plane e2e registry addons addons-csi containerd2 kind run test kind-test kind-conformance test-containerd2 unit kubeadm-test bench soak proto cluster cluster-down conformance conformance-cluster install uninstall vagrant-box vagrant-up vagrant-down vagrant-test vm-cluster-test fresh-check

setup: venv ## system packages, containerd (our config), CNI, local images, .venv
	bash tests/bed/setup.sh

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

control-plane: ## build the Kubernetes binaries the cluster tests run (once; cached in /var/cache/pykubelet/k8s)
	bash tests/bed/build-control-plane.sh

e2e: ## build e2e.test, ginkgo and the e2e images' programs of the same release (once; cached in /var/cache/pykubelet/e2e)
	bash tests/bed/build-conformance.sh

registry: ## build the CNCF Distribution registry the image pull tests push private images to (once; cached in /var/cache/pykubelet/registry)
	bash tests/bed/build-registry.sh

addons: ## CoreDNS, kube-proxy, flannel and metrics-server images built from their Go modules and imported under their upstream names, and pykubelet's own (localhost/pykubelet) for pykubelet-proxy.yaml; their manifests in build/addons/ (cached in /var/cache/pykubelet/addons)
	bash tests/bed/build-addons.sh

addons-csi: ## addons, plus the CSI hostpath driver's sidecars the Go module proxy serves (external-attacher, external-provisioner) and build/addons/csi-hostpath.yaml; the driver, its registrar and livenessprobe are not served (docs/addons.md)
	PYKUBELET_ADDONS_CSI=1 bash tests/bed/build-addons.sh

containerd2: ## build containerd 2.x (the current release) from its Go module, for the containerd 2.x tier (once; cached in /var/cache/pykubelet/containerd2)
	bash tests/bed/build-containerd2.sh

conformance: setup control-plane e2e ## Kubernetes' own [NodeConformance] e2e specs on one pykubelet node; NODE=kubelet: the real kubelet (CONFORMANCE_FOCUS, CONFORMANCE_SKIP, CONFORMANCE_PROCS)
	$(PY) -m tests.conformance.run

conformance-cluster: setup control-plane e2e addons ## e2e.test's whole [Conformance] suite as certification runs it, on a kubeadm cluster of three pykubelet nodes (flannel, CoreDNS, pykubelet proxy); NODE=kubelet: the real kubelet and kube-proxy (CONFORMANCE_FOCUS, CONFORMANCE_SKIP, CONFORMANCE_PROCS)
	$(PY) -m tests.conformance.cluster

kind: setup control-plane addons ## Docker (Debian's docker.io; its daemon started by tests/bed/docker.sh, `bash tests/bed/docker.sh stop` stops it), kind built from its Go module, kind's base image rebuilt from Debian 12 packages, checked to boot, and the node images kindest/node:v1.36.3 and pykubelet/kind-node:v1.36.3 (tests/bed/build-kind-node.sh; cached in /var/cache/pykubelet/kind)
	bash tests/bed/build-kind.sh
	bash tests/bed/build-kind-node.sh

kind-test: kind ## the kind tier (tests/kind): a kind cluster of pykubelet nodes, and a pykubelet worker joining a kindest/node cluster (docker started and stopped by the tier if it was not running)
	$(PY) -m pytest tests/kind $(PYTEST_ARGS)

kind-conformance: kind e2e ## make conformance's [NodeConformance] selection on a one-node kind cluster of pykubelet/kind-node:v1.36.3 (its control plane, untainted, runs every spec's pods); NODE=kubelet: on kindest/node:v1.36.3 (CONFORMANCE_FOCUS, CONFORMANCE_SKIP, CONFORMANCE_PROCS); results in build/conformance/kind-<node>
	$(PY) -m tests.conformance.kind

run: setup ## pykubelet standalone on manifests/, in the foreground
	$(VENV)/bin/pykubelet --pod-manifest-path manifests

vm-setup: ## qemu, mmdebstrap, Vagrant's insecure key and the Debian 12 image, for the VM tier (tests/vm/); vagrant-libvirt and libvirt for Vagrant
	bash tests/bed/vm-setup.sh
	bash tests/bed/vm_image.sh >/dev/null  # built here, not silently inside pytest (cached)

test: setup control-plane e2e registry addons containerd2 vm-setup vagrant-box kind ## unit + runtime, cluster, multi-node, kubeadm (with the add-ons and a sample of the [Conformance] specs across nodes), Service, kind, one-VM (through Vagrant) and a part of the conformance tests against the real containerd and control plane; a sample of the runtime, cluster and conformance tests against containerd 2.x
	$(PY) -m pytest $(PYTEST_ARGS)

test-containerd2: setup containerd2 ## the runtime tier against containerd 2.x: a containerd of its own (tests/bed/with-containerd2.sh), stopped afterwards
	bash tests/bed/with-containerd2.sh $(PY) -m pytest tests/runtime $(PYTEST_ARGS)

unit: venv ## only the tests that need no runtime
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

kubeadm-test: setup control-plane addons ## the cluster users build, on this machine: kubeadm init with CoreDNS and kube-proxy, flannel, kubeadm join, metrics-server, pykubelet-proxy (two pykubelet nodes in namespaces)
	$(PY) -m pytest tests/kubeadm $(PYTEST_ARGS)

bench: setup ## pod startup (CRI floor vs pykubelet; the real kubelet vs pykubelet on a cluster); agent vs runtime network mode; the kubelet API (exec, logs, stats), density at maxPods and churn vs the real kubelet; kubeadm join vs the real kubelet; flannel and CoreDNS bring-up vs the real kubelet; Service proxying vs the real kube-proxy
	$(PY) -m tests.bench.startup
	$(PY) -m tests.bench.cluster_startup
	$(PY) -m tests.bench.network
	$(PY) -m tests.bench.kubelet_api
	$(PY) -m tests.bench.density
	$(PY) -m tests.bench.churn
	$(PY) -m tests.bench.kubeadm
	$(PY) -m tests.bench.addons
	$(PY) -m tests.bench.proxy

soak: setup ## the long versions of the fuzz and fault suites (CI runs a sample of each)
	HYPOTHESIS_PROFILE=soak PYKUBELET_FUZZ_MANIFESTS=1000 PYKUBELET_OUTAGE_SECONDS=120 PYKUBELET_CHURN_CYCLES=500 \
		$(PY) -m pytest tests/unit/test_fuzzed_input.py tests/runtime/test_fuzzed_manifests.py \
		tests/cluster/test_outage.py tests/multinode/test_churn.py $(PYTEST_ARGS)

proto: venv ## regenerate the committed gRPC modules from proto/
	$(PY) proto/generate.py .

cluster: venv ## a real control plane on loopback (.cluster/admin.kubeconfig, .cluster/bin/kubectl)
	bash tests/bed/cluster.sh up

cluster-down: ## stop it (the PKI stays; add PURGE=1 to drop the etcd data too)
	bash tests/bed/cluster.sh down $(if $(PURGE),--purge,)

install: ## pykubelet as this machine's kubelet: /opt/pykubelet, /usr/bin/kubelet, kubelet.service + kubeadm's drop-in (systemd/)
	bash systemd/install.sh install

uninstall: ## remove everything `make install` put on the machine (pods keep running)
	bash systemd/install.sh uninstall

vagrant-box: vm-setup ## the VM tier's Debian 12 image as the Vagrant box pykubelet/debian12 (libvirt; cached on the image's content)
	bash tests/bed/vagrant_box.sh

vagrant-up: venv control-plane addons vagrant-box ## `vagrant up` of vagrant/Vagrantfile, offline: libvirt's daemons, the box, the bundle (kubeadm, kubectl, images, wheels); PKL_WORKERS, PKL_PROXY_MODE (iptables|nftables|ipvs); `make vagrant-down` ends it
	PYTHON=$(PY) bash tests/bed/vagrant.sh up

vagrant-down: ## `vagrant destroy -f` of vagrant-up's cluster, its bundle removed, libvirt's daemons stopped
	PYTHON=$(PY) bash tests/bed/vagrant.sh down

vagrant-test: venv control-plane addons vagrant-box ## vagrant-up's cluster (cp and w1) checked: nodes Ready, a pod resolving kubernetes.default through CoreDNS and reaching Services through the proxy, `systemctl restart kubelet` restarting no pod; then vagrant-down
	$(PY) -m pytest tests/vm/vagrant_cluster.py $(PYTEST_ARGS)

vm-cluster-test: venv control-plane vm-setup ## the Vagrantfile's provisioning on two Debian 12 VMs driven by plain qemu (no Vagrant): kubeadm init and join with pykubelet under systemd, restarts, a stop
	$(PY) -m pytest tests/vm/kubeadm_cluster.py $(PYTEST_ARGS)

fresh-check: ## the rehearsal before resolving anything that touches the test bed or a build: `make run` and every build of `make test` as a new machine runs them (empty caches, Go's too; the machine's are untouched)
	bash tests/bed/fresh-check.sh
