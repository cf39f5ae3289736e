"""An orders workflow gated by crashgate: fetch the order, charge the card, email a receipt."""
