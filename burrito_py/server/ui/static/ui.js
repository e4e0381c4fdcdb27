// Live updates (server-sent events) and the CSRF header for htmx requests. Our own script, no inline code.
(function () {
  "use strict";
  var csrf = document.querySelector('meta[name="csrf-token"]');
  document.addEventListener("htmx:configRequest", function (event) {
    if (csrf) { event.detail.headers["X-CSRF-Token"] = csrf.content; }
  });

  var sources = [];
  function connect() {
    sources.forEach(function (s) { s.close(); });
    sources = [];
    document.querySelectorAll("[data-sse]").forEach(function (el) {
      var source = new EventSource(el.getAttribute("data-sse"));
      sources.push(source);
      source.addEventListener("row", function (event) {
        var data = JSON.parse(event.data);
        var row = document.getElementById(data.id);
        if (!row) { return; }  // on another page, or filtered out
        if (data.html) { row.outerHTML = data.html; } else { row.remove(); }
      });
      source.addEventListener("attempts", function (event) {
        el.innerHTML = JSON.parse(event.data).html;
      });
      source.addEventListener("log", function (event) {
        var data = JSON.parse(event.data);
        var pre = document.getElementById("log-" + data.attempt);
        if (pre) { pre.textContent += data.text; }
      });
      source.addEventListener("done", function () { source.close(); });
    });
  }
  document.addEventListener("DOMContentLoaded", connect);
  // A filter, sort or page change swaps the table: follow the new view's events.
  document.addEventListener("htmx:afterSettle", connect);
})();
