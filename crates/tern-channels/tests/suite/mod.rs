mod telegram;
