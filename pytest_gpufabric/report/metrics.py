"""Live Prometheus metrics for ``--gpu-metrics-port PORT``: NVLink and RDMA counters, GPU health, test outcomes.

``MetricsExporter`` owns its own ``prometheus_client.CollectorRegistry`` (never the process-wide default, so two
exporters, or an exporter and anything else in the process using prometheus_client, never share or collide on
metric names) and serves it with ``prometheus_client.start_http_server`` on ``127.0.0.1`` unless told otherwise.
The samplers call the ``observe_*`` methods from their own threads; prometheus_client's metrics take a lock per
value, so that needs nothing more. ``start``/``stop`` are serialised by the exporter's own lock.

prometheus_client is an optional dependency, imported only when an exporter is made: importing this module
costs nothing, and without the package ``MetricsExporter()`` raises ImportError saying what to install.
``start_http_server`` must return ``(server, thread)`` (prometheus_client >= 0.20.0); ``stop()`` needs both:
``server.shutdown()`` ends ``serve_forever``, ``server.server_close()`` closes the listening socket (without it
the port stays taken: prometheus/client_python#1068), then the thread is joined.

The series, their labels, and why the hardware counters are Gauges: docs/suites.md, "Live metrics: the series".
"""

from __future__ import annotations

import numbers
import threading
from collections.abc import Iterable, Mapping

from ..fabric.rdma import RdmaDevice, port_data_bytes
from ..formats.counters import CounterSample

INSTALL_HINT = "pip install prometheus-client for --gpu-metrics-port"


def _is_number(value: object) -> bool:
    """int, float (and numpy scalars, which register as numbers.Real); bool counts as 0/1."""
    return isinstance(value, numbers.Real)


class MetricsExporter:
    """The metrics of one run, in a registry of their own, served over HTTP between ``start`` and ``stop``.

    ``observe_*`` and ``set_info`` may be called at any time, from any thread, before or after ``start``;
    a scrape shows the latest value of every series.
    """

    def __init__(self) -> None:
        try:
            import prometheus_client
        except ImportError as exc:
            raise ImportError(f"{INSTALL_HINT} ({exc})") from exc
        self._prometheus_client = prometheus_client
        self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        Gauge, Counter, Info = prometheus_client.Gauge, prometheus_client.Counter, prometheus_client.Info
        reg = self.registry

        self.nvlink_tx_bytes = Gauge(
            "gpufabric_nvlink_tx_bytes",
            "NVLink bytes transmitted, cumulative per GPU and link as the hardware counts them (can reset)",
            ["gpu", "link"], registry=reg)
        self.nvlink_rx_bytes = Gauge(
            "gpufabric_nvlink_rx_bytes",
            "NVLink bytes received, cumulative per GPU and link as the hardware counts them (can reset)",
            ["gpu", "link"], registry=reg)
        self.rdma_xmit_bytes = Gauge(
            "gpufabric_rdma_port_xmit_bytes",
            "RDMA port data bytes transmitted since its counters were cleared (port_xmit_data x 4, or irdma "
            "OutOctets)", ["device", "port"], registry=reg)
        self.rdma_rcv_bytes = Gauge(
            "gpufabric_rdma_port_rcv_bytes",
            "RDMA port data bytes received since its counters were cleared (port_rcv_data x 4, or irdma "
            "InOctets)", ["device", "port"], registry=reg)
        self.rdma_hw_counter = Gauge(
            "gpufabric_rdma_hw_counter",
            "RDMA port driver-defined counter (sysfs hw_counters), as read",
            ["device", "port", "counter"], registry=reg)
        self.gpu_health = Gauge(
            "gpufabric_gpu_health",
            "GPU health value; the metric label names it and its unit (temperature_c, power_w, ...)",
            ["gpu", "serial", "metric"], registry=reg)
        self.tests = Counter(
            "gpufabric_tests", "Tests finished, by outcome", ["outcome"], registry=reg)
        self.info = Info(
            "gpufabric", "The profile being accepted (name, sha256 of its file) and the plugin version",
            registry=reg)

        self._lock = threading.Lock()
        self._server = None
        self._thread: threading.Thread | None = None
        # series seen per gpu, so a health value that comes back None is removed, not left stale
        self._health_series: dict[str, set[tuple[str, str]]] = {}

    # ------------------------------------------------------------------------------------------- serving

    def start(self, port: int, addr: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` on ``addr:port`` in a daemon thread. ``port=0`` takes a free port (see ``port``).

        Raises OSError when the port is taken, RuntimeError when this exporter is already serving.
        """
        with self._lock:
            if self._server is not None:
                raise RuntimeError(f"metrics exporter already serving on port {self.port}")
            started = self._prometheus_client.start_http_server(port, addr, registry=self.registry)
            if not isinstance(started, tuple) or len(started) != 2:
                raise RuntimeError(
                    "prometheus_client.start_http_server returned no (server, thread), so the server could "
                    f"never be stopped; prometheus-client >= 0.20.0 is needed (got {started!r})")
            self._server, self._thread = started

    @property
    def port(self) -> int | None:
        """The port being served (the real one when started with 0); None when not serving."""
        server = self._server
        return None if server is None else server.server_address[1]

    @property
    def serving(self) -> bool:
        return self._server is not None

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop serving and free the port. Does nothing when not serving; the metrics keep their values."""
        with self._lock:
            server, thread = self._server, self._thread
            self._server = self._thread = None
        if server is None:
            return
        server.shutdown()  # ends serve_forever (waits for it)
        server.server_close()  # closes the listening socket: without it the port stays bound
        if thread is not None:
            thread.join(timeout_s)

    def __enter__(self) -> MetricsExporter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    # -------------------------------------------------------------------------------------------- updates

    def observe_nvlink(self, sample: CounterSample) -> None:
        """Every link's cumulative TX/RX of one sample, set as is (a sample of a legacy counter set in
        cycles or packets is not bytes and is ignored: the metric names promise bytes)."""
        if sample.units != "bytes":
            return
        for gpu, links in sample.gpus.items():
            for link, count in links.items():
                labels = (str(gpu), str(link))
                self.nvlink_tx_bytes.labels(*labels).set(count.tx_bytes)
                self.nvlink_rx_bytes.labels(*labels).set(count.rx_bytes)

    def observe_rdma(self, devices: Iterable[RdmaDevice]) -> None:
        """Every port's data bytes (where recorded) and numeric hw_counters of ``discover_rdma`` devices."""
        for dev in devices:
            for port in dev.ports:
                labels = (dev.name, str(port.port))
                data = port_data_bytes(port)
                if data is not None:
                    tx, rx = data
                    self.rdma_xmit_bytes.labels(*labels).set(tx)
                    self.rdma_rcv_bytes.labels(*labels).set(rx)
                for counter, value in (port.hw_counters or {}).items():
                    if _is_number(value):
                        self.rdma_hw_counter.labels(*labels, counter).set(value)

    def observe_health(self, gpu: int, serial: str, values: Mapping[str, float | int | None]) -> None:
        """One series per numeric value. None (not read this time) removes the metric's earlier series
        rather than leaving a stale value; anything else that is not a number is skipped."""
        gpu_label, serial_label = str(gpu), str(serial)
        with self._lock:
            seen = self._health_series.setdefault(gpu_label, set())
            for metric, value in values.items():
                key = (serial_label, str(metric))
                if value is None:
                    if key in seen:
                        self.gpu_health.remove(gpu_label, *key)
                        seen.discard(key)
                elif _is_number(value):
                    self.gpu_health.labels(gpu_label, *key).set(value)
                    seen.add(key)

    def observe_test(self, nodeid: str, outcome: str) -> None:
        """One finished test. ``nodeid`` is not a label: a series per test id would grow without bound."""
        self.tests.labels(str(outcome)).inc()

    def set_info(self, profile: str, sha256: str, plugin_version: str) -> None:
        self.info.info({"profile": str(profile), "sha256": str(sha256), "plugin_version": str(plugin_version)})

    # ------------------------------------------------------------------------------------------- reading

    def exposition(self) -> str:
        """The text a scrape would get now (for logs and tests; no HTTP involved)."""
        return self._prometheus_client.generate_latest(self.registry).decode("utf-8")
