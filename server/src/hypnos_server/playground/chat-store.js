// The chat's conversation kept in the tab's sessionStorage, so that a reload shows it again and can continue it.

const STORE = "hypnos.chat";

// The saved turns ([{message, thoughts, tele}]), or none when nothing (or something unreadable) is stored.
export function loadTurns() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(STORE) || "null");
    return Array.isArray(saved?.turns) ? saved.turns.filter((turn) => turn && turn.message && turn.message.role) : [];
  } catch (_) {
    return [];
  }
}

// Save the turns; false when the tab's storage is full (big attached images), the page then keeps them in memory.
export function saveTurns(turns) {
  try {
    if (turns.length) sessionStorage.setItem(STORE, JSON.stringify({ turns }));
    else sessionStorage.removeItem(STORE);
    return true;
  } catch (_) {
    return false;
  }
}
