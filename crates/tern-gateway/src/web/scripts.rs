//! The web inbox's three inline scripts, in one place: the pages that run them and the
//! Content-Security-Policy that allows them by hash (`layout.rs`) both read them here.

/// On every page: each `<time datetime>` (written in UTC, which stays the text without
/// scripts) is shown in the reader's own time zone, the UTC text kept as its tooltip.
/// `ternLocalTimes` is there for the list's live refresh to call on the fresh part.
pub(super) const LOCAL_TIME_SCRIPT: &str = r#"
(function () {
  function pad(n) { return (n < 10 ? '0' : '') + n; }
  function localize(root) {
    root.querySelectorAll('time[datetime]').forEach(function (t) {
      if (t.dataset.local) return;
      var d = new Date(t.getAttribute('datetime'));
      if (isNaN(d.getTime())) return;
      var zone = '';
      try {
        zone = new Intl.DateTimeFormat(undefined, { timeZoneName: 'short' })
          .formatToParts(d).filter(function (p) { return p.type === 'timeZoneName'; })
          .map(function (p) { return p.value; }).join('');
      } catch (_) {}
      t.title = t.textContent;
      t.textContent = d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) +
        ' ' + pad(d.getHours()) + ':' + pad(d.getMinutes()) + (zone ? ' ' + zone : '');
      t.dataset.local = '1';
    });
  }
  window.ternLocalTimes = localize;
  localize(document);
})();
"#;

/// Keeps the list's filters when the page refreshes itself or pages on; the tab's title
/// (with the pending count) follows the fresh page.
pub(super) const LIVE_SCRIPT: &str = r#"
(function () {
  var live = document.getElementById('live');
  if (!window.EventSource || !live) return;
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { credentials: 'same-origin', headers: { 'Accept': 'text/html' } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (text) {
        var doc = new DOMParser().parseFromString(text, 'text/html');
        var fresh = doc.getElementById('results');
        var now = document.getElementById('results');
        if (fresh && now) {
          if (window.ternLocalTimes) window.ternLocalTimes(fresh);
          now.replaceWith(fresh);
        }
        if (doc.title) document.title = doc.title;
      })
      .catch(function () {})
      .then(function () { busy = false; if (again) { again = false; refresh(); } });
  }
  var es = new EventSource('/inbox/events');
  es.addEventListener('open', function () { live.classList.add('on'); live.textContent = 'Live'; });
  es.addEventListener('error', function () { live.classList.remove('on'); live.textContent = 'Reconnecting…'; });
  es.addEventListener('change', refresh);
  es.addEventListener('reload', refresh);
})();
"#;

/// While a request is pending: each slider shows its value as it moves, and if someone else
/// settles the request meanwhile, the page says so above the form (it is not reloaded, so
/// nothing typed is lost). A script rather than `oninput` attributes: the page's
/// Content-Security-Policy allows no inline handlers, only scripts it names by hash.
pub(super) const PENDING_SCRIPT: &str = r#"
(function () {
  document.querySelectorAll('.slider input[type=range]').forEach(function (input) {
    var out = input.nextElementSibling;
    if (!out) return;
    input.addEventListener('input', function () { out.value = input.value; });
  });
})();
(function () {
  var notice = document.getElementById('elsewhere');
  if (!window.EventSource || !notice) return;
  var id = notice.dataset.id;
  var es = new EventSource('/inbox/events');
  es.addEventListener('open', function () { notice.dataset.live = 'on'; });
  es.addEventListener('change', function (e) {
    var c;
    try { c = JSON.parse(e.data); } catch (_) { return; }
    if (c.requestId === id && c.what === 'decided') { notice.hidden = false; es.close(); }
  });
  window.addEventListener('submit', function () { es.close(); });
})();
"#;
