// Live pages: an element #live with data-events listens to the console's
// server-sent events and, when the ledger changes, reads the page again and
// swaps #live for the new one. Without JavaScript, the queue refreshes
// itself (a meta refresh in <noscript>), and every page is whole as served.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !live.getAttribute("data-events") || !window.EventSource || !window.fetch) {
    return;
  }
  var source = new EventSource(live.getAttribute("data-events"));
  var busy = false;
  var again = false;
  var syncs = 0;

  // edited reports whether someone has begun to fill in a form of the
  // page: such a page is never replaced under their hands.
  function edited() {
    var fields = live.querySelectorAll("textarea, input:not([type=hidden]), select");
    for (var i = 0; i < fields.length; i++) {
      var field = fields[i];
      if (field.tagName === "SELECT") {
        var initial = 0;
        for (var j = 0; j < field.options.length; j++) {
          if (field.options[j].defaultSelected) {
            initial = j;
          }
        }
        if (field.selectedIndex !== initial) {
          return true;
        }
      } else if (field.value !== field.defaultValue) {
        return true;
      }
    }
    return false;
  }

  function reload() {
    // The next change, or a reload, shows what changed meanwhile.
    if (edited()) {
      return;
    }
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) { return response.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        if (!fresh) {
          // No longer a live page (the action was deleted: its tombstone
          // shows now): show it whole.
          window.location.reload();
          return;
        }
        if (!edited()) {
          live.replaceWith(fresh);
          live = fresh;
        }
      })
      .catch(function () {})
      .then(function () {
        busy = false;
        if (again) {
          again = false;
          reload();
          return;
        }
        // Says the page shows the ledger as of its stream's latest event.
        document.body.setAttribute("data-synced", String(++syncs));
      });
  }

  source.addEventListener("changed", reload);
  // Whatever changed between serving the page and the stream's watch (or
  // while a stream was being opened again) is read once it is open.
  source.addEventListener("open", reload);
})();
